// Moving BK-deep tiles of A and B from global memory into shared memory with 16-byte accesses.
// Used by steps 5-8 and the batched MLP trainer, so that the vectorised, transposing load is written once.
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

// One BK-deep tile of an operand, landing in shared memory as S[k][row] (row = m for A, n for B),
// the layout every inner product loop of the ladder reads. The operand's global layout decides
// which dimension the float4 accesses run along:
//   K_CONTIG = false: element (row, k) at p[row + k*ld]  (the ladder's A; a transposed B)
//   K_CONTIG = true:  element (row, k) at p[k + row*ld]  (the ladder's B; a transposed A),
//                     transposed on the way into shared memory.
// Both layouts serve the batched MLP trainer (kernels_cu/mlp/10_batched.cu), whose three GEMMs
// need A and B either way round. `rows` and `depth` are the exclusive limits (zero-filled past).
// PAD: extra floats per shared row (a multiple of 4, to keep float4 alignment).
template <int ROWS, int DEPTH, int NT, int PAD, bool K_CONTIG>
struct Tile {
    static_assert(DEPTH % 4 == 0, "DEPTH must be a multiple of 4 for float4 loads");
    static_assert((ROWS * DEPTH / 4) % NT == 0, "threads must share the tile's float4 loads evenly");
    static constexpr int PER_THREAD = ROWS * DEPTH / 4 / NT;
    float4 r[PER_THREAD];

    __device__ __forceinline__ void fetch(const float* __restrict__ p, int ld, int rows, int depth, int r0, int k0,
                                          int tid, bool vec) {
#pragma unroll
        for (int i = 0; i < PER_THREAD; ++i) {
            const int idx = tid + i * NT;
            if (K_CONTIG) {
                const int kq = idx % (DEPTH / 4), row = idx / (DEPTH / 4);
                const int gr = r0 + row;
                r[i] = gr < rows ? load4_guarded(p + (size_t)gr * ld, k0 + kq * 4, depth, vec)
                                 : make_float4(0.f, 0.f, 0.f, 0.f);
            } else {
                const int rq = idx % (ROWS / 4), k = idx / (ROWS / 4);
                const int gk = k0 + k;
                r[i] = gk < depth ? load4_guarded(p + (size_t)gk * ld, r0 + rq * 4, rows, vec)
                                  : make_float4(0.f, 0.f, 0.f, 0.f);
            }
        }
    }
    __device__ __forceinline__ void stash(float (*S)[ROWS + PAD], int tid) const {
#pragma unroll
        for (int i = 0; i < PER_THREAD; ++i) {
            const int idx = tid + i * NT;
            if (K_CONTIG) {
                const int kq = idx % (DEPTH / 4), row = idx / (DEPTH / 4);
                S[kq * 4 + 0][row] = r[i].x;
                S[kq * 4 + 1][row] = r[i].y;
                S[kq * 4 + 2][row] = r[i].z;
                S[kq * 4 + 3][row] = r[i].w;
            } else {
                const int rq = idx % (ROWS / 4), k = idx / (ROWS / 4);
                *reinterpret_cast<float4*>(&S[k][rq * 4]) = r[i];
            }
        }
    }
};

// The ladder's operands: A (M x K, ld M) and B (K x N, ld K), column-major.
template <int ROWS, int DEPTH, int NT, int PAD = 0>
struct TileA : Tile<ROWS, DEPTH, NT, PAD, false> {
    __device__ __forceinline__ void fetch(const float* __restrict__ A, int M, int K, int m0, int k0, int tid,
                                          bool vec) {
        Tile<ROWS, DEPTH, NT, PAD, false>::fetch(A, M, M, K, m0, k0, tid, vec);
    }
};

template <int COLS, int DEPTH, int NT, int PAD = BS_PAD>
struct TileB : Tile<COLS, DEPTH, NT, PAD, true> {
    __device__ __forceinline__ void fetch(const float* __restrict__ B, int N, int K, int n0, int k0, int tid,
                                          bool vec) {
        Tile<COLS, DEPTH, NT, PAD, true>::fetch(B, K, N, K, n0, k0, tid, vec);
    }
};
