// Step 3: thread coarsening (the seed's GEMM2, WPT).
//
// Idea:   each thread computes WPT elements of C in one row, spaced RTS = TS/WPT columns apart.
//         In the inner loop one shared load of A is reused for WPT FMAs: the seed's "8+1 loads for
//         8 FMAs" at WPT = 8, against 2 loads per FMA in step 2. Fewer threads per block also
//         leave room for more blocks per SM.
// Source: seed 001 "GEMM Optimization 2: Coarsening" (Nugteren's kernel 3).
// Params: TS in {16, 32, 64}: tile edge. WPT in {1, 2, 4, 8, 16, 32}: work per thread, must
//         divide TS. TS*TS/WPT threads per block (<= 1024); 2*TS*TS*4 bytes of shared memory.
// Sizes:  any M, N, K >= 1 (edges zero-filled, as in step 2).
// Launch: block (TS, TS/WPT); grid (ceil(M/TS), ceil(N/TS)).
#include "common/gemm_common.cuh"

#ifndef TS
#define TS 32
#endif
#ifndef WPT
#define WPT 8
#endif
#define RTS (TS / WPT)

extern "C" __global__ void gemm(int M, int N, int K, float alpha, const float* __restrict__ A,
                                const float* __restrict__ B, float beta, float* __restrict__ C) {
    const int row = threadIdx.x;                 // local m, 0..TS-1
    const int col = threadIdx.y;                 // local n, 0..RTS-1
    const int globalRow = TS * blockIdx.x + row;
    const int globalCol = TS * blockIdx.y + col;
    __shared__ float Asub[TS][TS];
    __shared__ float Bsub[TS][TS];

    float acc[WPT];
#pragma unroll
    for (int w = 0; w < WPT; ++w) acc[w] = 0.0f;

    const int numTiles = (K + TS - 1) / TS;
    for (int t = 0; t < numTiles; ++t) {
#pragma unroll
        for (int w = 0; w < WPT; ++w) {
            const int tiledRow = TS * t + row;
            const int tiledCol = TS * t + col + w * RTS;
            const int bCol = globalCol + w * RTS;
            Asub[col + w * RTS][row] = (globalRow < M && tiledCol < K) ? A[(size_t)tiledCol * M + globalRow] : 0.0f;
            Bsub[col + w * RTS][row] = (tiledRow < K && bCol < N) ? B[(size_t)bCol * K + tiledRow] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TS; ++k) {
            const float a = Asub[k][row];        // the one load shared by WPT FMAs
#pragma unroll
            for (int w = 0; w < WPT; ++w) acc[w] += a * Bsub[col + w * RTS][k];
        }
        __syncthreads();
    }
#pragma unroll
    for (int w = 0; w < WPT; ++w) {
        const int n = globalCol + w * RTS;
        if (globalRow < M && n < N) {
            float* c = &C[(size_t)n * M + globalRow];
            *c = gemm_epilogue(acc[w], alpha, beta, c);
        }
    }
}
