// Step 1: naive. One thread per element of C, reading its row of A and column of B from global
// memory.
//
// Idea:   the seed's triple loop (001, "GEMM", after Nugteren's tutorial) with the two outer loops
//         turned into the grid. Every operand is re-read from DRAM/L2 by every thread that needs
//         it: 2 global loads per FMA, so this is bound by load throughput, not arithmetic.
// Params: none.
// Sizes:  any M, N, K >= 1.
// Launch: block (32, 8); grid (ceil(M/32), ceil(N/8)). threadIdx.x walks m, the contiguous
//         dimension of A and C in column-major, so those accesses coalesce; B(k, n) is the same
//         address across a warp's x-threads and is broadcast.
#include "common/gemm_common.cuh"

extern "C" __global__ void gemm(int M, int N, int K, float alpha, const float* __restrict__ A,
                                const float* __restrict__ B, float beta, float* __restrict__ C) {
    const int m = blockIdx.x * blockDim.x + threadIdx.x;
    const int n = blockIdx.y * blockDim.y + threadIdx.y;
    if (m >= M || n >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += A[m + (size_t)k * M] * B[k + (size_t)n * K];
    C[m + (size_t)n * M] = gemm_epilogue(acc, alpha, beta, &C[m + (size_t)n * M]);
}
