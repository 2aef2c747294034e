// Step 9: Hopper's own path. Bulk tensor copies into an mbarrier-guarded ring, a producer
// warpgroup feeding consumer warpgroups, and wgmma (3xTF32, or one TF32 product).
//
// Idea:   step 8 issues mma.sync (HMMA in SASS): every warp loads its fragments from shared memory
//         and waits for its own MMAs, so the tensor cores idle between a warp's loads and math.
//         Hopper decouples the three: the copy engine (TMA) moves whole tiles global -> shared on
//         its own, completing on an mbarrier; wgmma reads B straight from shared memory and runs
//         asynchronously for a whole warpgroup (HGMMA in SASS); and the roles split: one producer
//         warpgroup keeps a STAGES-deep ring filled while two consumer warpgroups keep the tensor
//         cores busy, each hiding the other's bookkeeping.
//         3xTF32 as in step 8: x = big + small, products small*big + big*small + big*big. B must
//         exist in shared memory twice (big, small: the hardware would simply drop the low mantissa
//         bits), so the producer warpgroup splits each B tile in place once it lands, then fences
//         (generic -> async proxy) before the consumers may read it. wgmma takes TF32 operands from
//         shared memory only K-major, and A is M-major, so A goes through registers: a consumer
//         loads its fragment with conflict-free 8-byte loads (rows of the A tile padded by 8
//         floats; the fragment's rows g, g+8 are mapped to adjacent rows 2g, 2g+1, a free
//         permutation undone by the epilogue) and splits it there.
//         Accuracy: the tensor core's accumulation truncates (step 8 measured 2.9e-5 at K = 4096
//         with the running sum inside the MMA), so each BK slice's 3 x BK/8 products go into a
//         fresh partial sum (wgmma's scale-d = 0) that is added to the running sum with FADD.
//         PRECISION=1 keeps one big*big product, accumulated in the MMA: plain TF32.
// Source: PTX ISA 8.x (cp.async.bulk.tensor, mbarrier, wgmma.mma_async with A in registers,
//         setmaxnreg); CUTLASS's sm90 warp-specialized mainloop; the 3xTF32 of step 8.
// Params: BM in {64, 128}: block rows, 64 per consumer warpgroup; BN in {64, 128}: block columns
//         (one wgmma m64nBNk8 per k8 step); BK = 32: one 128-byte swizzle row of TF32 per B row;
//         STAGES in {2..6}: the ring's depth; PRECISION in {3, 1}. Defaults BM=128 BN=128 STAGES=4
//         PRECISION=3 (nnbench/registry.py). Shared memory: STAGES * (BK*(BM+8) + BN*BK*(1 or 2)) * 4
//         bytes of dynamic shared memory, plus 1 KiB of alignment.
// Sizes:  any M, N, K >= 1. An operand goes by the copy engine when its leading dimension is a
//         multiple of 4 (the tensor map's 16-byte stride rule); otherwise the host first copies it,
//         inside the timed launch, to a buffer whose leading dimension is rounded up to a multiple of
//         4 (pad_leading_dim below) and maps that. The producer's 4-byte cp.async path into the same
//         layout remains for an operand that cannot be mapped even so (`paths` says which; the
//         table names the path).
// Split-K: where the tiles fill less than half the SMs (Net 8's weight gradients: K = 4096, 16 or
//         fewer tiles), the host launches gridDim.z slices of K; scale_c (below) first sets
//         C = beta C and each slice adds alpha times its share with atomics.
// Launch: THREADS = 128 * (BM/64 + 1); grid (ceil(M/BM), ceil(N/BN), splits); sm_90a only.
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
#ifndef PRECISION
#define PRECISION 3
#endif

#include "common/wgmma_mainloop.cuh"

extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm(int M, int N, int K, float alpha, const float* __restrict__ A, const float* __restrict__ B, float beta,
     float* __restrict__ C, const __grid_constant__ CUtensorMap a_map, const __grid_constant__ CUtensorMap b_map,
     int paths) {
    extern __shared__ unsigned char smem_raw[];
    // Aligned by pointer arithmetic on the shared array: an integer cast would lose the address space
    // and turn every access into a generic one.
    const Ring ring{smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023)};
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const int wg = threadIdx.x / 128, wt = threadIdx.x % 128;

    if (threadIdx.x == 0) ring_init(ring, paths, &a_map, &b_map);
    __syncthreads();

    if (wg == 0) {
        regs_dealloc<PRODUCER_REGS>();
        const KRange kr(K);
        produce(ring, kr, wt, paths, &a_map, &b_map, A, B, M, N, K, m0, n0);
        return;
    }

    regs_alloc<CONSUMER_REGS>();
    const KRange kr(K);  // per role: computed before the split, it was spilled
    const int t = wt % 4;
    const int row = consumer_row(wg, wt);
    float acc[NACC];
    consume(acc, ring, kr, wg, wt);

    // Epilogue: d[4j + h] is (row, 8j + 2t + h), d[4j + 2 + h] is (row + 1, 8j + 2t + h): the two
    // rows are adjacent in column-major C, one 8-byte store where M is even.
    const int gm = m0 + row;
    if (gridDim.z > 1) {  // split-K: the host set C = beta C; each split adds alpha times its share
        if (kr.count == 0) return;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int gn = n0 + 8 * j + 2 * t + h;
                if (gn >= N || gm >= M) continue;
                float* c = C + (size_t)gn * M + gm;
                atomicAdd(c, alpha * acc[4 * j + h]);
                if (gm + 1 < M) atomicAdd(c + 1, alpha * acc[4 * j + 2 + h]);
            }
        return;
    }
    const bool pair = (M & 1) == 0 && gm + 1 < M;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int gn = n0 + 8 * j + 2 * t + h;
            if (gn >= N || gm >= M) continue;
            float* c = C + (size_t)gn * M + gm;
            const float v0 = acc[4 * j + h], v1 = acc[4 * j + 2 + h];
            if (pair) {
                float2 r = make_float2(alpha * v0, alpha * v1);
                if (beta != 0.0f) {
                    const float2 old = *reinterpret_cast<const float2*>(c);
                    r.x += beta * old.x;
                    r.y += beta * old.y;
                }
                *reinterpret_cast<float2*>(c) = r;
            } else {
                c[0] = gemm_epilogue(v0, alpha, beta, c);
                if (gm + 1 < M) c[1] = gemm_epilogue(v1, alpha, beta, c + 1);
            }
        }
}

// The fallback for a leading dimension that breaks the tensor maps' 16-byte stride rule: the host
// has the operand copied, inside the timed launch, to one whose leading dimension `ld` is rounded up
// to a multiple of 4, and maps that. The pad rows are never read (the map's size excludes them).
extern "C" __global__ void pad_leading_dim(const float* __restrict__ src, float* __restrict__ dst, int rows, int cols,
                                           int ld) {
    const long long total = (long long)rows * cols;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
        const long long c = i / rows;
        dst[c * ld + (i - c * rows)] = src[i];
    }
}

// Split-K's first pass: C = beta C (exactly 0 where beta = 0, whatever C held), before the splits add.
extern "C" __global__ void scale_c(float* __restrict__ C, long long count, float beta) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < count; i += (long long)gridDim.x * blockDim.x)
        C[i] = beta == 0.0f ? 0.0f : beta * C[i];
}
