// Step 2: shared-memory tiling (the seed's GEMM1).
//
// Idea:   a TS x TS block stages a TS x TS tile of A and of B in shared memory, then every thread
//         runs TS FMAs out of shared memory. Global traffic drops by a factor of TS. The seed's PTX
//         shows the cost that is left: each FMA needs two shared loads (1 useful instruction in 3).
// Source: seed 001 "GEMM1" (Nugteren, "Tutorial: OpenCL SGEMM tuning", kernel 2).
// Params: TS in {8, 16, 32}: tile edge; TS*TS threads per block (<= 1024).
// Sizes:  any M, N, K >= 1. The seed's loop runs K/TS tiles and silently drops the remainder
//         (numTiles = K/TS); here the last tile is zero-filled instead, so no multiple-of-TS
//         constraint is needed. Out-of-range rows and columns are zero-filled the same way.
// Launch: block (TS, TS); grid (ceil(M/TS), ceil(N/TS)).
#include "common/gemm_common.cuh"

#ifndef TS
#define TS 32
#endif

extern "C" __global__ void gemm(int M, int N, int K, float alpha, const float* __restrict__ A,
                                const float* __restrict__ B, float beta, float* __restrict__ C) {
    const int row = threadIdx.x;                 // local m
    const int col = threadIdx.y;                 // local n
    const int globalRow = TS * blockIdx.x + row;
    const int globalCol = TS * blockIdx.y + col;
    // Indexed [k][m] and [n][k]: as the seed notes, column-major puts k first for A.
    __shared__ float Asub[TS][TS];
    __shared__ float Bsub[TS][TS];

    float acc = 0.0f;
    const int numTiles = (K + TS - 1) / TS;
    for (int t = 0; t < numTiles; ++t) {
        const int tiledRow = TS * t + row;       // k index of the B element this thread loads
        const int tiledCol = TS * t + col;       // k index of the A element this thread loads
        Asub[col][row] = (globalRow < M && tiledCol < K) ? A[(size_t)tiledCol * M + globalRow] : 0.0f;
        Bsub[col][row] = (tiledRow < K && globalCol < N) ? B[(size_t)globalCol * K + tiledRow] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TS; ++k) acc += Asub[k][row] * Bsub[col][k];
        __syncthreads();
    }
    if (globalRow < M && globalCol < N) {
        float* c = &C[(size_t)globalCol * M + globalRow];
        *c = gemm_epilogue(acc, alpha, beta, c);
    }
}
