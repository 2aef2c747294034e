// MLP step 10: mini-batch training as GEMMs on the GEMM ladder's best mainloop, the epilogues fused.
//
// Idea:   per-sample training is latency-bound (the fused version's floor is its grid barriers).
//         A batch of B samples turns each layer's matrix-vector products into GEMMs with N = B,
//         which run at tensor-core rates. Three GEMMs per layer (layout in batched_common.cuh):
//           forward          H_l      = sigmoid(Wt_l^T H_(l-1))         A transposed, B as stored
//           backward (data)  D_(l-1)  = (W_l D_l) * h(1 - h)             both as stored
//           weight gradient  G_l      = H_(l-1) D_l^T                    B transposed
//         The sigmoid and the slope h(1 - h) are applied in the GEMM epilogues, in registers, so
//         H and D are each written once and never re-read by a separate pass. The weight gradient
//         is written as split-K partial sums (its output is only n_(l-1)+1 x n_l, too few tiles
//         to fill the GPU when K = B is long) that momentum_update folds into the weights.
// Source: the 3xTF32 mainloop of ladder step 10 (common/tf32x3.cuh); epilogue fusion as in
//         CUTLASS's epilogue visitor; split-K as in CUTLASS's "parallel split-K".
// Params: BM, BN, BK, WM, WN, MIN_BLOCKS as in gemm/08_tf32x3.cu (same rules).
// Launch: 1-D blocks of THREADS; grid (ceil(M/BM), ceil(N/BN), slices). Needs sm_80 or later.
#include "common/tf32x3.cuh"
#include "mlp/batched_common.cuh"

#include "common/tf32x3_params.cuh"
template <bool A_KCONTIG, bool B_KCONTIG>
using Block = Tf32x3Block<BM, BN, BK, WM, WN, A_KCONTIG, B_KCONTIG>;
#define THREADS (Block<false, false>::THREADS)

// H_l rows 0..n_l-1 (M = n_l, N = B, K = n_(l-1) + 1: the row of ones brings the bias in).
extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
forward_sigmoid(int M, int N, int K, const float* __restrict__ Wt, int ldw, const float* __restrict__ Hin,
                int ldin, float* __restrict__ H, int ldh) {
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    Block<true, true> blk;
    blk.run(Wt, ldw, Hin, ldin, M, N, 0, K, m0, n0);
    blk.for_each_output(M, N, m0, n0, [&](int m, int n, float z) { H[(size_t)n * ldh + m] = sigmoid(z); });
}

// D_(l-1) (M = n_(l-1), N = B, K = n_l). A = Wt_l as stored, its bias row left out by M, since
// the bias feeds no neuron below. Hin = H_(l-1), the outputs whose slope scales the deltas.
extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
backward_delta(int M, int N, int K, const float* __restrict__ Wt, int ldw, const float* __restrict__ D,
               int ldd, float* __restrict__ Dout, int lddout, const float* __restrict__ Hin, int ldin) {
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    Block<false, true> blk;
    blk.run(Wt, ldw, D, ldd, M, N, 0, K, m0, n0);
    blk.for_each_output(M, N, m0, n0, [&](int m, int n, float s) {
        const float h = Hin[(size_t)n * ldin + m];
        Dout[(size_t)n * lddout + m] = s * h * (1.0f - h);
    });
}

// G_l slice z (M = n_(l-1) + 1, N = n_l, K = B, k in [z * k_per_slice, (z+1) * k_per_slice)).
extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
weight_gradient(int M, int N, int K, const float* __restrict__ Hin, int ldin, const float* __restrict__ D, int ldd,
                float* __restrict__ G, int ldg, int k_per_slice, long long slice_stride) {
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const int k_begin = blockIdx.z * k_per_slice, k_end = min(K, k_begin + k_per_slice);
    float* out = G + blockIdx.z * slice_stride;
    Block<false, false> blk;
    blk.run(Hin, ldin, D, ldd, M, N, k_begin, k_end, m0, n0);
    blk.for_each_output(M, N, m0, n0, [&](int m, int n, float g) { out[(size_t)n * ldg + m] = g; });
}
