// Step 5: float4 loads with a transposed shared tile.
//
// Idea:   step 4 with every memory access 16 bytes wide. Global loads of A (along m) and B (along
//         k) are float4; B is transposed into Bs[k][n] on the way in so the inner loop reads A and
//         B alike as float4 rows (LDS.128): a quarter of the shared-load instructions of step 4.
//         Each thread's WPTM rows are split into float4 groups strided by 4*TSM/WPTM, so the 8
//         threads of an LDS.128 phase read 128 contiguous bytes (no bank conflict); C is written
//         with float4 stores.
// Source: siboehm/SGEMM_CUDA kernel 6 (vectorised loads, transposed As), mapped to column-major.
// Params: TSM, TSN in {64, 128}; TSK in {8, 16, 32}; WPTM, WPTN in {4, 8}. Threads =
//         (TSM/WPTM)*(TSN/WPTN) and must evenly share the tile's float4 loads.
// Sizes:  any M, N, K >= 1. float4 accesses need the leading dimension (M for A and C, K for B)
//         to be a multiple of 4; otherwise the same kernel falls back to guarded scalar accesses.
// Launch: block (TSM/WPTM * TSN/WPTN) threads, 1-D; grid (ceil(M/TSM), ceil(N/TSN)).
#include "common/gemm_tiles.cuh"

#ifndef TSM
#define TSM 128
#endif
#ifndef TSN
#define TSN 128
#endif
#ifndef TSK
#define TSK 8
#endif
#ifndef WPTM
#define WPTM 8
#endif
#ifndef WPTN
#define WPTN 8
#endif
#define RTSM (TSM / WPTM)
#define RTSN (TSN / WPTN)
#define THREADS (RTSM * RTSN)
static_assert(WPTM % 4 == 0 && WPTN % 4 == 0, "register tile must be whole float4s");

extern "C" __global__ void __launch_bounds__(THREADS)
gemm(int M, int N, int K, float alpha, const float* __restrict__ A, const float* __restrict__ B,
     float beta, float* __restrict__ C) {
    const int tid = threadIdx.x;
    const int tm = tid % RTSM, tn = tid / RTSM;
    const int m0 = blockIdx.x * TSM, n0 = blockIdx.y * TSN;
    const bool vecA = ld_is_vec4(M), vecB = ld_is_vec4(K);

    __shared__ __align__(16) float As[TSK][TSM];
    __shared__ __align__(16) float Bs[TSK][TSN + BS_PAD];
    TileA<TSM, TSK, THREADS> ta;
    TileB<TSN, TSK, THREADS> tb;

    float acc[WPTM][WPTN] = {};
    float a[WPTM], b[WPTN];

    for (int k0 = 0; k0 < K; k0 += TSK) {
        ta.fetch(A, M, K, m0, k0, tid, vecA);
        tb.fetch(B, N, K, n0, k0, tid, vecB);
        ta.stash(As, tid);
        tb.stash(Bs, tid);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TSK; ++k) {
#pragma unroll
            for (int g = 0; g < WPTM / 4; ++g)
                *reinterpret_cast<float4*>(&a[4 * g]) = *reinterpret_cast<const float4*>(&As[k][tm * 4 + g * RTSM * 4]);
#pragma unroll
            for (int g = 0; g < WPTN / 4; ++g)
                *reinterpret_cast<float4*>(&b[4 * g]) = *reinterpret_cast<const float4*>(&Bs[k][tn * 4 + g * RTSN * 4]);
#pragma unroll
            for (int i = 0; i < WPTM; ++i)
#pragma unroll
                for (int j = 0; j < WPTN; ++j) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }

    const bool vecC = ld_is_vec4(M);
#pragma unroll
    for (int j = 0; j < WPTN; ++j) {
        const int gn = n0 + tn * 4 + (j / 4) * RTSN * 4 + (j % 4);
        if (gn >= N) continue;
#pragma unroll
        for (int g = 0; g < WPTM / 4; ++g) {
            const float4 v = make_float4(acc[4 * g][j], acc[4 * g + 1][j], acc[4 * g + 2][j], acc[4 * g + 3][j]);
            store4_epilogue(C + (size_t)gn * M, m0 + tm * 4 + g * RTSM * 4, M, vecC, v, alpha, beta);
        }
    }
}
