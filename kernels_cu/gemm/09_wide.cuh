// Step 9's transposed path, for small M and wide N (Net 8's 100x4096x501 and 7x4096x101): the host
// builds 09_tf32x3_wgmma.cu with WIDE_N defined, and this header is then the module's only kernel,
// `gemm_wide` (nnbench/workloads/gemm/session.py, wide_plan, picks it and its shape per GEMM).
//
// Why: with M <= 128 the main kernel's wgmma M (64 rows per consumer) is mostly padding or idle, its B
// (K x N, K-major, K odd) cannot go by the copy engine, and its producer's chain per k-block (4-byte copies,
// the split in shared memory, a proxy fence, two barriers) measured ~1 us a k-block on these shapes. Here
// C^T = B^T A^T: the wide dimension N feeds wgmma's M (64 columns of C per warpgroup), and M feeds wgmma's
// n (WIDE_N = M rounded up to 8; n8 for M = 7). B^T, the big operand, is wgmma's A from registers, which
// takes any layout, so B's columns are read as they lie. A^T is wgmma's B from shared memory, which TF32
// wants K-major; A is M-major, so the block writes A^T once, transposed and split into big and small,
// for its slice of K, before its k-loop.
//   - No producer warpgroup: each warpgroup copies its own B tiles (64 columns x 32 k, 4-byte cp.async,
//     a warp per column: coalesced whatever K's alignment) into a STAGES-deep ring of its own, with
//     cp.async groups, and reads its fragments from it with 16-byte loads (rows padded to 36 floats:
//     conflict-free); the split into big and small happens in registers.
//   - k order: wgmma's k8 step ks, index kk reads physical k 8 (kk % 4) + 2 ks + kk / 4 of the k-block, so
//     a thread's k values of one column are 8 consecutive floats (two 16-byte loads); A^T's shared tile
//     holds the same permutation (chunk c of 4 k holds physical 8i + c, i = 0..3).
//   - WIDE_G warpgroups per block take WIDE_G adjacent 64-column tiles and share A^T (for M = 100, A^T's
//     slice is as large as a warpgroup's share of B).
//   - Split-K across blocks (gridDim.z slices of `per` k-blocks, chosen by the host so that A^T's slice
//     fits in shared memory and the SMs fill): partials to a workspace, the tile's slices meet at a
//     counter, each sums its share of the tile in slice order (deterministic), as the main kernel's
//     reduce_split_k. The slices must all be resident: the host keeps the grid within the SM count.
//   - Accuracy as the main kernel's: each k-block's 3 x 4 products into a fresh partial sum, added with
//     FADD; PRECISION=1 accumulates one big x big product in the MMA.
// Launch: grid (ceil(N / (64 WIDE_G)), ceil(M / WIDE_N), slices), 128 WIDE_G threads, dynamic shared
// memory wide_smem_bytes(per) (the host's formula in suites/gemm.py matches).
#pragma once
#include "common/gemm_common.cuh"
#include "common/hopper.cuh"
#include "common/tf32x3.cuh"
#include "gemm/09_wgmma_n.cuh"

#ifndef WIDE_G
#define WIDE_G 1
#endif
#define WIDE_THREADS (128 * WIDE_G)
#define WIDE_ACC (WIDE_N / 2)            // accumulators per thread: m64 x WIDE_N over 128 threads
#define WIDE_BT_BYTES (WIDE_N * BK * 4)  // one k-block of A^T: WIDE_N rows of 128 bytes (the 128-byte swizzle)
#define WIDE_XP 36                       // floats per column of a B tile in the ring: 16-byte fragment loads hit 32 banks
#define WIDE_X_BYTES (64 * WIDE_XP * 4)
#define WIDE_COPIES (PRECISION == 3 ? 2 : 1)
static_assert(WIDE_N % 8 == 0 && WIDE_N >= 8 && WIDE_N <= 128, "wgmma n: a multiple of 8, at most 128 here");
static_assert(BK == 32, "a k-block of A^T is one 128-byte swizzle row per row of A^T");

// cp.async with groups (the ring's own completion tracking: no mbarriers, no producer).
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int PENDING>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(PENDING) : "memory"); }
// A warpgroup's own barrier (ids 1 and 2; 0 is __syncthreads), named by constants: a barrier id in a
// register makes ptxas reserve all 16.
__device__ __forceinline__ void warpgroup_sync(int wg) {
    static_assert(WIDE_G <= 2, "two warpgroups at most: barriers 1 and 2");
    if (wg == 0) asm volatile("bar.sync 1, 128;" ::: "memory");
    else asm volatile("bar.sync 2, 128;" ::: "memory");
}

// Shared memory: A^T's big tiles, its small tiles, then each warpgroup's ring of B tiles.
__host__ __device__ constexpr int wide_smem_bytes(int per) {
    return per * WIDE_BT_BYTES * WIDE_COPIES + WIDE_G * STAGES * WIDE_X_BYTES + 1024;
}

// This warpgroup's k-block kb (global index) of B's columns n0..n0+63 into ring slot s: thread wt copies
// k = wt % 32 of columns wt / 32, + 4, ...; zeros past K and N.
__device__ __forceinline__ void copy_b_tile(float* xs, const float* __restrict__ B, int N, int K, int n0, int kb,
                                            int wt) {
    const int k = kb * BK + wt % 32, c0 = wt / 32;
    const bool k_ok = k < K;
    const float* src = B + (size_t)(n0 + c0) * K + k;
    const size_t step = (size_t)4 * K;
    xs += c0 * WIDE_XP + wt % 32;
    const int cols = N - n0 - c0;  // columns left from this thread's first
#pragma unroll
    for (int c = 0; c < 64; c += 4, src += step) {
        const bool ok = k_ok && c < cols;
        cp_async_4(xs + c * WIDE_XP, ok ? src : B, ok);
    }
}

// A^T for k-blocks [kb0, kb0 + count), rows j0..j0 + WIDE_N - 1 (zeros past M and K), big tiles at `big`
// and small ones at `small`, in the 128-byte swizzle a wgmma descriptor reads (hopper.cuh,
// wgmma_desc_sw128). Thread e writes 16-byte chunk c = e % 8 of rows 4q..4q+3 (q = e / 8 % (WIDE_N / 4)):
// eight threads cover one row's eight chunks, so each 16-byte store phase hits 32 banks. Its 4 x 4 values
// come from 4 loads of A along m (16-byte ones where lda allows).
__device__ __forceinline__ void build_at(unsigned char* big, unsigned char* small, const float* __restrict__ A,
                                         int M, int K, int j0, int kb0, int count, int tid) {
    const bool vec = ld_is_vec4(M);
    const int total = count * (WIDE_N / 4) * 8;
    // UNROLL chunks a thread at a time, all their loads before any store: a chunk's loads wait on L2, so
    // one chunk after another would pay its latency each time (n104: 3.25 chunks a thread at 100x4096x501). At
    // n < 64 a thread has one chunk or none, and the unrolled code only lengthens the kernel (measured 2-4%
    // on 7x4096x101; lab/journal/step9-wide.md).
    constexpr int UNROLL = WIDE_N >= 64 ? 4 : 1;
    for (int e0 = tid; e0 < total; e0 += UNROLL * WIDE_THREADS) {
        float v[UNROLL][4][4];  // v[u][i][r]: row 4q + r at physical k 8i + c of chunk u's k-block
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int e = e0 + u * WIDE_THREADS;
            const int c = e % 8, q = e / 8 % (WIDE_N / 4), kb = e / (8 * (WIDE_N / 4));
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int k = (kb0 + kb) * BK + 8 * i + c;
                const float4 x = e < total && k < K ? load4_guarded(A + (size_t)k * M, j0 + 4 * q, M, vec)
                                                    : make_float4(0.f, 0.f, 0.f, 0.f);
                v[u][i][0] = x.x;
                v[u][i][1] = x.y;
                v[u][i][2] = x.z;
                v[u][i][3] = x.w;
            }
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int e = e0 + u * WIDE_THREADS;
            if (e >= total) break;
            const int c = e % 8, q = e / 8 % (WIDE_N / 4), kb = e / (8 * (WIDE_N / 4));
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int row = 4 * q + r;
                const int at = kb * WIDE_BT_BYTES + row * 128 + ((c ^ (row & 7)) << 4);
                unsigned h[4];
#if PRECISION == 3
                unsigned l[4];
#pragma unroll
                for (int i = 0; i < 4; ++i) split(v[u][i][r], h[i], l[i]);
                *reinterpret_cast<uint4*>(small + at) = make_uint4(l[0], l[1], l[2], l[3]);
#else
#pragma unroll
                for (int i = 0; i < 4; ++i) h[i] = to_tf32(v[u][i][r]);
#endif
                *reinterpret_cast<uint4*>(big + at) = make_uint4(h[0], h[1], h[2], h[3]);
            }
        }
    }
}

// Walks a thread's accumulators: fn(r, j, v0, v1) with r its tile column of B (0..63, this warpgroup's)
// and j, j + 1 its columns of A^T (rows of C), relative to the tile's start. acc[4jj + h] is (row g, column
// 8jj + 2t + h) of the m64nWIDE_N tile, acc[4jj + 2 + h] row g + 8 (hopper.cuh).
template <class Fn>
__device__ __forceinline__ void for_each_wide(const float (&acc)[WIDE_ACC], int wt, Fn&& fn) {
    const int r = (wt / 32) * 16 + wt % 32 / 4, t = wt % 4;
#pragma unroll
    for (int jj = 0; jj < WIDE_N / 8; ++jj) {
        fn(r, 8 * jj + 2 * t, acc[4 * jj], acc[4 * jj + 1]);
        fn(r + 8, 8 * jj + 2 * t, acc[4 * jj + 2], acc[4 * jj + 3]);
    }
}

// C(j, n) = alpha v + beta C(j, n) for j, j + 1 (j even) at column n: one 8-byte store where aligned.
__device__ __forceinline__ void store_pair(float* __restrict__ C, int M, int j, int n, float v0, float v1,
                                           float alpha, float beta) {
    float* c = C + (size_t)n * M + j;
    if (j + 1 < M && ((reinterpret_cast<size_t>(c) & 7) == 0)) {
        float2 r = make_float2(alpha * v0, alpha * v1);
        if (beta != 0.0f) {
            const float2 old = *reinterpret_cast<const float2*>(c);
            r.x += beta * old.x;
            r.y += beta * old.y;
        }
        *reinterpret_cast<float2*>(c) = r;
    } else {
        c[0] = gemm_epilogue(v0, alpha, beta, c);
        if (j + 1 < M) c[1] = gemm_epilogue(v1, alpha, beta, c + 1);
    }
}

extern "C" __global__ void __launch_bounds__(WIDE_THREADS, 1)
gemm_wide(int M, int N, int K, float alpha, const float* __restrict__ A, const float* __restrict__ B, float beta,
          float* __restrict__ C, int per, int* __restrict__ split_sync, float* __restrict__ split_work) {
    extern __shared__ unsigned char smem_raw[];
    unsigned char* big = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    unsigned char* small = big + per * WIDE_BT_BYTES;
    const int wg = __shfl_sync(0xffffffff, threadIdx.x / 128, 0), wt = threadIdx.x % 128;
    float* ring = reinterpret_cast<float*>(big + per * WIDE_BT_BYTES * WIDE_COPIES) + wg * STAGES * 64 * WIDE_XP;
    const int tile_n = blockIdx.x * WIDE_G * 64, n0 = tile_n + wg * 64, j0 = blockIdx.y * WIDE_N;
    const int k_blocks = (K + BK - 1) / BK, kb0 = blockIdx.z * per;
    const int count = max(0, min(k_blocks, kb0 + per) - kb0);

    // The ring's first k-blocks in flight while the block writes A^T.
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
        if (s < count) copy_b_tile(ring + s * 64 * WIDE_XP, B, N, K, n0, kb0 + s, wt);
        cp_async_commit();
    }
    build_at(big, small, A, M, K, j0, kb0, count, threadIdx.x);
    fence_proxy_async();  // A^T's ordinary stores, visible to wgmma's reads
    __syncthreads();

    float acc[WIDE_ACC];
#pragma unroll
    for (int r = 0; r < WIDE_ACC; ++r) acc[r] = 0.0f;
    const float* frag = ring + ((wt / 32) * 16 + wt % 32 / 4) * WIDE_XP + 8 * (wt % 4);  // column r, k 8t..8t+7
    for (int i = 0; i < count; ++i) {
        const int s = i % STAGES;
        cp_async_wait<STAGES - 1>();  // k-block i (group i) landed, for this thread's copies
        warpgroup_sync(wg);           // ... and everyone's
        const float* x = frag + s * 64 * WIDE_XP;
        const float4 lo0 = *reinterpret_cast<const float4*>(x), lo1 = *reinterpret_cast<const float4*>(x + 4);
        const float4 hi0 = *reinterpret_cast<const float4*>(x + 8 * WIDE_XP);
        const float4 hi1 = *reinterpret_cast<const float4*>(x + 8 * WIDE_XP + 4);
        warpgroup_sync(wg);  // the slot is read: refill it
        if (i + STAGES < count) copy_b_tile(ring + s * 64 * WIDE_XP, B, N, K, n0, kb0 + i + STAGES, wt);
        cp_async_commit();
        const float lo[8] = {lo0.x, lo0.y, lo0.z, lo0.w, lo1.x, lo1.y, lo1.z, lo1.w};
        const float hi[8] = {hi0.x, hi0.y, hi0.z, hi0.w, hi1.x, hi1.y, hi1.z, hi1.w};
        // k8 step ks: a0 (g, kk = t) is physical k 8t + 2ks, a2 (g, t + 4) is 8t + 2ks + 1; a1, a3 the column + 8.
        unsigned fb[BK / 8][4];
#if PRECISION == 3
        unsigned fs[BK / 8][4];
#pragma unroll
        for (int ks = 0; ks < BK / 8; ++ks) {
            split(lo[2 * ks], fb[ks][0], fs[ks][0]);
            split(hi[2 * ks], fb[ks][1], fs[ks][1]);
            split(lo[2 * ks + 1], fb[ks][2], fs[ks][2]);
            split(hi[2 * ks + 1], fb[ks][3], fs[ks][3]);
        }
#else
#pragma unroll
        for (int ks = 0; ks < BK / 8; ++ks) {
            fb[ks][0] = to_tf32(lo[2 * ks]);
            fb[ks][1] = to_tf32(hi[2 * ks]);
            fb[ks][2] = to_tf32(lo[2 * ks + 1]);
            fb[ks][3] = to_tf32(hi[2 * ks + 1]);
        }
#endif
        const unsigned long long at_big = wgmma_desc_sw128(big + i * WIDE_BT_BYTES);
        wgmma_fence();
#if PRECISION == 3
        const unsigned long long at_small = wgmma_desc_sw128(small + i * WIDE_BT_BYTES);
        float part[WIDE_ACC];
#pragma unroll
        for (int ks = 0; ks < BK / 8; ++ks) {
            const unsigned long long step = (ks * 32) >> 4;  // 32 bytes further along k, in 16-byte units
            WgmmaTf32<WIDE_N>::mma(part, fs[ks], at_big + step, ks > 0);  // small terms first
            WgmmaTf32<WIDE_N>::mma(part, fb[ks], at_small + step, 1);
            WgmmaTf32<WIDE_N>::mma(part, fb[ks], at_big + step, 1);
        }
        wgmma_commit();
        wgmma_wait<0>();
#pragma unroll
        for (int r = 0; r < WIDE_ACC; ++r) acc[r] += part[r];
#else
#pragma unroll
        for (int ks = 0; ks < BK / 8; ++ks) WgmmaTf32<WIDE_N>::mma(acc, fb[ks], at_big + ((ks * 32) >> 4), 1);
        wgmma_commit();
        wgmma_wait<0>();
#endif
    }

    if (gridDim.z == 1) {
        for_each_wide(acc, wt, [&](int r, int j, float v0, float v1) {
            if (n0 + r < N && j0 + j < M) store_pair(C, M, j0 + j, n0 + r, v0, v1, alpha, beta);
        });
        return;
    }
    // Split-K: this slice's partial (64 WIDE_G columns of B x WIDE_N, row-major) to the workspace, the
    // tile's slices meet, then this slice sums its share of the tile over every slice, in slice order.
    constexpr int TILE = 64 * WIDE_G * WIDE_N;
    const int tile = blockIdx.y * gridDim.x + blockIdx.x, splits = gridDim.z;
    float* partials = split_work + (size_t)tile * splits * TILE;
    float* mine = partials + (size_t)blockIdx.z * TILE + wg * 64 * WIDE_N;
    for_each_wide(acc, wt, [&](int r, int j, float v0, float v1) {
        *reinterpret_cast<float2*>(mine + r * WIDE_N + j) = make_float2(v0, v1);
    });
    split_k_meet(split_sync + 2 * tile, splits, threadIdx.x == 0, [] { __syncthreads(); });
    // This slice's share of the tile in whole float4s (WIDE_N % 4 == 0: four consecutive elements share a column
    // of B), UNROLL of them a thread at a time, every slice's partial loaded before any is added (in slice
    // order, so the sum is deterministic).
    constexpr int UNROLL = 4;
    const int share = (TILE / 4 + splits - 1) / splits * 4;
    const int first = blockIdx.z * share, last = min(TILE, first + share);
    for (int e0 = first + 4 * threadIdx.x; e0 < last; e0 += UNROLL * 4 * WIDE_THREADS) {
        float4 sum[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) sum[u] = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
        for (int z = 0; z < splits; ++z) {
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const int e = e0 + u * 4 * WIDE_THREADS;
                if (e < last) {
                    const float4 p = __ldcg(reinterpret_cast<const float4*>(partials + (size_t)z * TILE + e));
                    sum[u].x += p.x;
                    sum[u].y += p.y;
                    sum[u].z += p.z;
                    sum[u].w += p.w;
                }
            }
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int e = e0 + u * 4 * WIDE_THREADS;
            const int n = tile_n + e / WIDE_N, j = j0 + e % WIDE_N;
            if (e >= last || n >= N) continue;
            float* c = C + (size_t)n * M + j;
            const float s[4] = {sum[u].x, sum[u].y, sum[u].z, sum[u].w};
#pragma unroll
            for (int h = 0; h < 4; ++h)
                if (j + h < M) c[h] = gemm_epilogue(s[h], alpha, beta, c + h);
        }
    }
    split_k_leave(split_sync + 2 * tile, splits, threadIdx.x == 0, [] { __syncthreads(); });
}
