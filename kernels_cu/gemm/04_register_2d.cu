// Step 4: 2D register blocking.
//
// Idea:   coarsen in both dimensions. Each thread keeps a WPTM x WPTN block of C in registers and,
//         per k, loads WPTM values of A and WPTN of B from shared memory into registers, then runs
//         WPTM*WPTN FMAs on them (an outer product). Shared loads per FMA fall from
//         (1 + 1/WPT) in step 3 to (1/WPTN + 1/WPTM): 0.25 at 8 x 8. The block tile grows to
//         TSM x TSN, cutting global traffic per FMA again.
// Source: Nugteren's tutorial kernel 6 (the seed's reference); siboehm/SGEMM_CUDA kernel 5.
// Params: TSM, TSN in {32, 64, 128}: block tile; TSK in {8, 16, 32}: k-slice per stage;
//         WPTM, WPTN in {2, 4, 8}: register tile. Threads = (TSM/WPTM)*(TSN/WPTN) <= 1024 and must
//         evenly share the A and B tile loads (TSM*TSK and TSK*TSN multiples of the thread count).
// Sizes:  any M, N, K >= 1 (edges zero-filled).
// Launch: block (TSM/WPTM, TSN/WPTN); grid (ceil(M/TSM), ceil(N/TSN)).
//         A thread's rows are strided by TSM/WPTM, so a warp's shared loads hit consecutive banks
//         and its stores of C coalesce.
#include "common/gemm_common.cuh"

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

extern "C" __global__ void __launch_bounds__(THREADS)
gemm(int M, int N, int K, float alpha, const float* __restrict__ A, const float* __restrict__ B,
     float beta, float* __restrict__ C) {
    const int tidm = threadIdx.x, tidn = threadIdx.y;
    const int tid = tidn * RTSM + tidm;
    const int m0 = blockIdx.x * TSM, n0 = blockIdx.y * TSN;

    __shared__ float Asub[TSK][TSM];
    // +1 column: the transposed store of B below walks k, which would otherwise land every
    // thread of a warp on a few banks.
    __shared__ float Bsub[TSK][TSN + 1];

    float acc[WPTM][WPTN] = {};
    float areg[WPTM], breg[WPTN];

    for (int k0 = 0; k0 < K; k0 += TSK) {
#pragma unroll
        for (int i = 0; i < TSM * TSK / THREADS; ++i) {
            const int idx = tid + i * THREADS;
            const int m = idx % TSM, k = idx / TSM;          // consecutive threads: consecutive m
            const int gm = m0 + m, gk = k0 + k;
            Asub[k][m] = (gm < M && gk < K) ? A[(size_t)gk * M + gm] : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < TSK * TSN / THREADS; ++i) {
            const int idx = tid + i * THREADS;
            const int k = idx % TSK, n = idx / TSK;          // consecutive threads: consecutive k
            const int gk = k0 + k, gn = n0 + n;
            Bsub[k][n] = (gk < K && gn < N) ? B[(size_t)gn * K + gk] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TSK; ++k) {
#pragma unroll
            for (int wm = 0; wm < WPTM; ++wm) areg[wm] = Asub[k][tidm + wm * RTSM];
#pragma unroll
            for (int wn = 0; wn < WPTN; ++wn) breg[wn] = Bsub[k][tidn + wn * RTSN];
#pragma unroll
            for (int wm = 0; wm < WPTM; ++wm)
#pragma unroll
                for (int wn = 0; wn < WPTN; ++wn) acc[wm][wn] += areg[wm] * breg[wn];
        }
        __syncthreads();
    }
#pragma unroll
    for (int wn = 0; wn < WPTN; ++wn) {
        const int gn = n0 + tidn + wn * RTSN;
#pragma unroll
        for (int wm = 0; wm < WPTM; ++wm) {
            const int gm = m0 + tidm + wm * RTSM;
            if (gm < M && gn < N) {
                float* c = &C[(size_t)gn * M + gm];
                *c = gemm_epilogue(acc[wm][wn], alpha, beta, c);
            }
        }
    }
}
