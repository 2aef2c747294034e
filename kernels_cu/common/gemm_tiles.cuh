// Moving BK-deep tiles of A and B from global memory into shared memory with 16-byte accesses.
// Used by steps 5-7 (and later ones) so that the vectorised, transposing load is written once.
//
// In column-major, A's contiguous dimension is m, so a tile of A lands in shared memory as
// As[k][m] unchanged. B's contiguous dimension is k, but the inner product loop wants a row of
// B across n for each k, so B is transposed on the way in: Bs[k][n]. That is the "transposed
// shared tile" (siboehm's row-major kernels transpose A instead; column-major swaps the roles).
//
// The load is split into fetch (global -> registers) and stash (registers -> shared) so that a
// double-buffered kernel can issue the next tile's fetch before computing on the current one.
#pragma once
#include "common/gemm_common.cuh"

// Row stride of Bs: 4 floats of padding keep float4 alignment and spread the transposed stores
// (which walk k) over all 32 banks.
#define BS_PAD 4

// PAD: extra floats per shared row (a multiple of 4, to keep float4 alignment).
template <int ROWS, int DEPTH, int NT, int PAD = 0>
struct TileA {
    static_assert((ROWS * DEPTH / 4) % NT == 0, "threads must share the A tile's float4 loads evenly");
    static constexpr int PER_THREAD = ROWS * DEPTH / 4 / NT;
    float4 r[PER_THREAD];

    __device__ __forceinline__ void fetch(const float* __restrict__ A, int M, int K, int m0, int k0, int tid,
                                          bool vec) {
#pragma unroll
        for (int i = 0; i < PER_THREAD; ++i) {
            const int idx = tid + i * NT;
            const int mq = idx % (ROWS / 4), k = idx / (ROWS / 4);
            const int gk = k0 + k;
            r[i] = gk < K ? load4_guarded(A + (size_t)gk * M, m0 + mq * 4, M, vec) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
    }
    __device__ __forceinline__ void stash(float (*As)[ROWS + PAD], int tid) const {
#pragma unroll
        for (int i = 0; i < PER_THREAD; ++i) {
            const int idx = tid + i * NT;
            const int mq = idx % (ROWS / 4), k = idx / (ROWS / 4);
            *reinterpret_cast<float4*>(&As[k][mq * 4]) = r[i];
        }
    }
};

template <int COLS, int DEPTH, int NT, int PAD = BS_PAD>
struct TileB {
    static_assert(DEPTH % 4 == 0, "DEPTH must be a multiple of 4 for float4 loads of B");
    static_assert((COLS * DEPTH / 4) % NT == 0, "threads must share the B tile's float4 loads evenly");
    static constexpr int PER_THREAD = COLS * DEPTH / 4 / NT;
    float4 r[PER_THREAD];

    __device__ __forceinline__ void fetch(const float* __restrict__ B, int N, int K, int n0, int k0, int tid,
                                          bool vec) {
#pragma unroll
        for (int i = 0; i < PER_THREAD; ++i) {
            const int idx = tid + i * NT;
            const int kq = idx % (DEPTH / 4), n = idx / (DEPTH / 4);
            const int gn = n0 + n;
            r[i] = gn < N ? load4_guarded(B + (size_t)gn * K, k0 + kq * 4, K, vec) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
    }
    __device__ __forceinline__ void stash(float (*Bs)[COLS + PAD], int tid) const {
#pragma unroll
        for (int i = 0; i < PER_THREAD; ++i) {
            const int idx = tid + i * NT;
            const int kq = idx % (DEPTH / 4), n = idx / (DEPTH / 4);
            Bs[kq * 4 + 0][n] = r[i].x;
            Bs[kq * 4 + 1][n] = r[i].y;
            Bs[kq * 4 + 2][n] = r[i].z;
            Bs[kq * 4 + 3][n] = r[i].w;
        }
    }
};
