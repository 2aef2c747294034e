// Step 7: double buffering (software pipelining through registers).
//
// Idea:   step 6 leaves the warps idle while a tile travels from DRAM: fetch, barrier, compute,
//         barrier. Here shared memory holds two stages. The next tile's global loads are issued
//         into registers before the current tile is computed, so their latency hides behind
//         BK x (FMAs) of work, and they are stashed into the other stage afterwards. One barrier
//         per k-tile instead of two.
//         cp.async (sm_80+) could copy global -> shared without the register hop, but it cannot
//         transpose, and B must be transposed in column-major; the register path keeps one layout.
// Source: the prefetching scheme of Volkov & Demmel (2008) and CUTLASS's "double buffered"
//         mainloop; siboehm/SGEMM_CUDA kernel 11.
// Params: as step 6, plus MIN_BLOCKS in {1, 2}: resident blocks per SM asked of the register
//         allocator (2 caps registers at 128 for 256 threads); shared memory doubles to 2 * (BK*BM + BK*(BN+4)) * 4 bytes (<= 48 KiB).
// Sizes:  any M, N, K >= 1.
// Launch: 1-D blocks of THREADS; grid (ceil(M/BM), ceil(N/BN)).
#include "common/gemm_warptile.cuh"

#ifndef MIN_BLOCKS
#define MIN_BLOCKS 2  // the registry's default: two resident blocks per SM (docs/RESULTS.md)
#endif

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
gemm(int M, int N, int K, float alpha, const float* __restrict__ A, const float* __restrict__ B,
     float beta, float* __restrict__ C) {
    const int tid = threadIdx.x;
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const bool vecA = ld_is_vec4(M), vecB = ld_is_vec4(K);

    __shared__ __align__(16) float As[2][BK][BM];
    __shared__ __align__(16) float Bs[2][BK][BN + BS_PAD];
    TileA<BM, BK, THREADS> ta;
    TileB<BN, BK, THREADS> tb;
    WarpTile<BM, BN, BK, WM, WN, WNITER, TM, TN> wt;
    wt.init(tid);

    ta.fetch(A, M, K, m0, 0, tid, vecA);
    tb.fetch(B, N, K, n0, 0, tid, vecB);
    ta.stash(As[0], tid);
    tb.stash(Bs[0], tid);
    __syncthreads();

    int stage = 0;
    for (int k0 = 0; k0 < K; k0 += BK) {
        const bool more = k0 + BK < K;
        if (more) {  // in flight while this stage is computed
            ta.fetch(A, M, K, m0, k0 + BK, tid, vecA);
            tb.fetch(B, N, K, n0, k0 + BK, tid, vecB);
        }
        wt.compute(As[stage], Bs[stage]);
        if (more) {
            // The other stage was last read in the previous iteration, before its barrier.
            ta.stash(As[stage ^ 1], tid);
            tb.stash(Bs[stage ^ 1], tid);
        }
        __syncthreads();
        stage ^= 1;
    }
    wt.store(C, M, N, m0, n0, alpha, beta);
}
