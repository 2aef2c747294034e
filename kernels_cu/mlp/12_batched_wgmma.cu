// MLP step 12: mini-batch training on the GEMM ladder's step 9 mainloop (bulk tensor copies, a
// producer warpgroup, wgmma 3xTF32), the epilogues of step 10 kept: sigmoid, slope, bias as a row of
// ones, split-K weight gradients as partial sums.
//
// Idea:   step 9 runs 2x cuBLAS SGEMM where step 8 ran at 0.9x, so the trainer's three GEMMs per layer
//         move onto it (common/wgmma_mainloop.cuh, the same code as gemm/09_tf32x3_wgmma.cu). That
//         mainloop takes A M-major (it reaches the tensor cores through registers) and B K-major (TF32
//         wgmma reads shared memory K-major only). Step 10's layouts give the forward a K-major A (Wt^T)
//         and the weight gradient an N-major B (D^T), so the layouts change instead of the mainloop:
//           Wn_l ((n_l) x (n_(l-1) + 1), ld = round4(n_l)): neuron-major weights, bias column last;
//           DT_l (B x n_l, ld = round4(B)): the deltas, sample-major (one column per neuron);
//           H_l as in batched_common.cuh (feature-major, the row of ones under it).
//         Then every GEMM is A M-major, B K-major:
//           forward          H_l      = sigmoid(Wn_l H_(l-1))               M = n_l,  N = B, K = n_(l-1)+1
//           backward (data)  DT_(l-1) = (DT_l Wn_l) * h(1 - h)              M = B, N = n_(l-1), K = n_l
//                            (Wn_l's first n_(l-1) columns: the bias feeds no neuron below)
//           weight gradient  G_l      = H_(l-1) DT_l                       M = n_(l-1)+1, N = n_l, K = B
//         G_l comes out in step 10's layout (input-major, split-K slices), so momentum_update_transposed
//         below sums the slices and applies them to the neuron-major Wn_l through a shared-memory tile,
//         for every layer in one launch at the end of the step (one launch instead of one per layer).
// Source: the step 9 mainloop; CUTLASS's epilogue visitor; "parallel split-K".
// Params: BM, BN, BK, STAGES as in gemm/09_tf32x3_wgmma.cu (PRECISION = 3, fixed). Defaults BM=128
//         BN=128 STAGES=4 (nnbench/registry.py).
// Sizes:  every operand is mapped by the copy engine (leading dimensions are multiples of 4 floats and
//         buffers 16-byte aligned by construction; the host refuses otherwise), so the mainloop's
//         cp.async fallback, which assumes ld = rows, is never taken.
// Launch: THREADS = 128 * (BM/64 + 1); grid (ceil(M/BM), ceil(N/BN), slices); sm_90a only.
#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 32
#endif
#ifndef STAGES
#define STAGES 4
#endif
#define PRECISION 3

#include "common/wgmma_mainloop.cuh"
#include "common/plant.cuh"
#include "mlp/batched_common.cuh"

#define PATHS_ALL (PATH_TMA_A | PATH_TMA_B)

// The mainloop of one block over its k-blocks; the consumers then run `epilogue(gm, n, v0, v1)` for each
// column n of the tile (absolute), v0 at row gm and v1 at gm + 1 (absolute; gm even).
template <class Epilogue>
__device__ __forceinline__ void block_gemm(int M, int N, int K, const float* A, const float* B, const CUtensorMap* a_map,
                                           const CUtensorMap* b_map, int k_per_slice, Epilogue&& epilogue) {
    extern __shared__ unsigned char smem_raw[];
    const Ring ring{smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023)};
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const int wg = threadIdx.x / 128, wt = threadIdx.x % 128;
    if (threadIdx.x == 0) ring_init(ring, PATHS_ALL, a_map, b_map);
    __syncthreads();
    if (wg == 0) {
        regs_dealloc<PRODUCER_REGS>();
        const KRange kr(K, k_per_slice);
        produce(ring, kr, wt, PATHS_ALL, a_map, b_map, A, B, M, N, K, m0, n0);
        return;
    }
    regs_alloc<CONSUMER_REGS>();
    const KRange kr(K, k_per_slice);
    float acc[NACC];
    consume(acc, ring, kr, wg, wt);
    const int gm = m0 + consumer_row(wg, wt);
    if (gm >= M) return;
    for_each_pair(acc, wt, [&](int n, float v0, float v1) {
        if (n0 + n < N) epilogue(gm, n0 + n, v0, v1);
    });
}

// Two adjacent rows of one column: one 8-byte store where both are inside (p 8-byte aligned: gm is
// even and every leading dimension a multiple of 4), else the first alone.
__device__ __forceinline__ void store_pair(float* p, bool both, float v0, float v1) {
    if (both)
        *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
    else
        p[0] = v0;
}

#define MAPS const __grid_constant__ CUtensorMap a_map, const __grid_constant__ CUtensorMap b_map

// H_l = sigmoid(Wn_l H_(l-1)): A = Wn_l, B = H_(l-1) (its row of ones brings the bias in).
extern "C" __global__ void __launch_bounds__(THREADS, 1)
forward_sigmoid(int M, int N, int K, const float* Wn, const float* Hin, MAPS, float* __restrict__ H, int ldh) {
    block_gemm(M, N, K, Wn, Hin, &a_map, &b_map, (K + BK - 1) / BK, [&](int m, int n, float z0, float z1) {
        store_pair(H + (size_t)n * ldh + m, m + 1 < M, sigmoid(z0), sigmoid(z1));
    });
}

// DT_(l-1) = (DT_l Wn_l) * h(1 - h): A = DT_l, B = Wn_l (N = n_(l-1) leaves its bias column out); h from
// H_(l-1), read transposed (sample m, neuron n).
extern "C" __global__ void __launch_bounds__(THREADS, 1)
backward_delta(int M, int N, int K, const float* DT, const float* Wn, MAPS, float* __restrict__ DTout, int ldt,
               const float* __restrict__ Hin, int ldin) {
    block_gemm(M, N, K, DT, Wn, &a_map, &b_map, (K + BK - 1) / BK, [&](int m, int n, float s0, float s1) {
        const float h0 = Hin[(size_t)m * ldin + n];
        const float h1 = m + 1 < M ? Hin[(size_t)(m + 1) * ldin + n] : 0.0f;
        store_pair(DTout + (size_t)n * ldt + m, m + 1 < M, s0 * (h0 * (1.0f - h0)), s1 * (h1 * (1.0f - h1)));
    });
}

// G_l slice z = H_(l-1) DT_l over k-blocks [z * k_per_slice, (z + 1) * k_per_slice): A = H_(l-1),
// B = DT_l. Written, never added: momentum_update_transposed sums the slices.
extern "C" __global__ void __launch_bounds__(THREADS, 1)
weight_gradient(int M, int N, int K, const float* Hin, const float* DT, MAPS, float* __restrict__ G, int ldg,
                int k_per_slice, long long slice_stride) {
    float* out = G + blockIdx.z * slice_stride;
    block_gemm(M, N, K, Hin, DT, &a_map, &b_map, k_per_slice, [&](int m, int n, float g0, float g1) {
        store_pair(out + (size_t)n * ldg + m, m + 1 < M, g0, g1);
    });
}

// Classic momentum for every layer of the net in one launch, at the end of the step (every gradient
// was taken with the old weights, as the reference does), as batched_common.cuh's momentum_update
// per layer: v = momentum v + rate sum_s G_s; W += v. Weights Wn and velocities V are neuron-major
// (ld = ldn), the gradient slices G input-major (ld = ldg). A 32 x 32 tile goes through shared memory
// so both sides stay coalesced; one element per thread (block (32, 32)), the slices' loads unrolled
// so that several are in flight at once. Blocks [first_block, next layer's) belong to one layer.
#define MAX_LAYERS 32
struct UpdateLayer {  // 56 bytes; nnbench/workloads/train/batched.py packs it as "PPPqiiiiii"
    float* Wn;
    float* V;
    const float* G;
    long long slice_stride;
    int ldn, ldg, inputs, neurons, slices, first_block;
};
struct UpdateTable {
    UpdateLayer layer[MAX_LAYERS];
    int count;
};

extern "C" __global__ void __launch_bounds__(1024)
momentum_update_transposed(const __grid_constant__ UpdateTable table, float rate, float momentum) {
    __shared__ float tile[32][33];  // [neuron][input], padded: the transposed read is conflict-free
    int l = 0;
    while (l + 1 < table.count && (int)blockIdx.x >= table.layer[l + 1].first_block) ++l;
    const UpdateLayer& u = table.layer[l];
    const int local = blockIdx.x - u.first_block, tiles_i = (u.inputs + 31) / 32;
    const int i0 = local % tiles_i * 32, o0 = local / tiles_i * 32;
    {  // read along inputs: G's columns are neurons
        const int i = i0 + threadIdx.x, o = o0 + threadIdx.y;
        float g = 0.0f;
        if (i < u.inputs && o < u.neurons) {
            const float* src = u.G + (size_t)o * u.ldg + i;
#pragma unroll 8
            for (int s = 0; s < u.slices; ++s) g += src[s * u.slice_stride];
        }
        tile[threadIdx.y][threadIdx.x] = g;
    }
    __syncthreads();
    const int o = o0 + threadIdx.x, i = i0 + threadIdx.y;  // write along neurons: Wn's columns are inputs
    if (i >= u.inputs || o >= u.neurons) return;
    const size_t at = (size_t)i * u.ldn + o;
    const float v = momentum * u.V[at] + rate * tile[threadIdx.x][threadIdx.y];
    u.V[at] = v;
    u.Wn[at] += v;
}
