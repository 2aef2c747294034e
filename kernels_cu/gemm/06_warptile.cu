// Step 6: hierarchical block / warp / thread tiling.
//
// Idea:   step 5's block tile, with threads grouped so that each warp owns a WM x WN piece of C
//         and iterates over WMITER x WNITER sub-tiles of it. A warp's shared loads now touch only
//         the rows of As and columns of Bs that its sub-tiles need, every lane's float4 read is
//         conflict-free, and the register tile per thread (TM x TN per sub-tile) can grow without
//         the block's shared-memory footprint growing with it.
// Source: seed 002 (CME 213 tutorial, "Hierarchical GEMM": block, warp and thread tiling, after
//         CUTLASS); siboehm/SGEMM_CUDA kernel 10 for the lane layout, mapped to column-major.
// Params: BM, BN in {64, 128, 256}: block tile; BK in {8, 16, 32}; WM, WN: warp tile (divides the
//         block tile); WNITER: sub-tiles along n; TM, TN in {4, 8}: thread tile.
//         Threads = 32 * (BM/WM) * (BN/WN); (WM*WN) / (32*TM*TN*WNITER) sub-tiles along m must be
//         whole and a sub-tile must hold exactly 32 lanes.
// Sizes:  any M, N, K >= 1 (float4 where the leading dimension allows, as in step 5).
// Launch: 1-D blocks of THREADS; grid (ceil(M/BM), ceil(N/BN)).
#include "common/gemm_warptile.cuh"

extern "C" __global__ void __launch_bounds__(THREADS)
gemm(int M, int N, int K, float alpha, const float* __restrict__ A, const float* __restrict__ B,
     float beta, float* __restrict__ C) {
    const int tid = threadIdx.x;
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const bool vecA = ld_is_vec4(M), vecB = ld_is_vec4(K);

    __shared__ __align__(16) float As[BK][BM];
    __shared__ __align__(16) float Bs[BK][BN + BS_PAD];
    TileA<BM, BK, THREADS> ta;
    TileB<BN, BK, THREADS> tb;
    WarpTile<BM, BN, BK, WM, WN, WNITER, TM, TN> wt;
    wt.init(tid);

    for (int k0 = 0; k0 < K; k0 += BK) {
        ta.fetch(A, M, K, m0, k0, tid, vecA);
        tb.fetch(B, N, K, n0, k0, tid, vecB);
        ta.stash(As, tid);
        tb.stash(Bs, tid);
        __syncthreads();
        wt.compute(As, Bs);
        __syncthreads();
    }
    wt.store(C, M, N, m0, n0, alpha, beta);
}
