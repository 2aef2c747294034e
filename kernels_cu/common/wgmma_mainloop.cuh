// Step 9's mainloop (kernels_cu/gemm/09_tf32x3_wgmma.cu says what it adds and why), shared by every
// kernel that runs it under an epilogue of its own: the ladder's GEMM and the mini-batch trainer's
// GEMMs (kernels_cu/mlp/12_batched_wgmma.cu). The includer defines BM, BN, BK, STAGES and PRECISION
// first. A is M-major (A(m, k) = A[m + k * lda]) and B K-major (B(k, n) = B[k + n * ldb]), each by a
// tensor map (A by four phase maps where its leading dimension breaks the maps' 16-byte stride rule) or,
// where none could be made, by 4-byte cp.async (`paths`).
//
// A kernel: ring_init; then the producer warpgroup (wg == 0) calls produce and returns, and each
// consumer thread calls consume, which leaves its fragment of the C tile in acc, and walks it with
// for_each_pair. The roles must stay the two branches of one if/else (setmaxnreg's rule).
//
// CLUSTER_M (default 1; GEMM step 9 sets it): blocks of a thread-block cluster of CLUSTER_M along m share
// their B tile (same n0). Each block's producer copies 1/CLUSTER_M of it, multicast into every block's
// ring (its own bytes counted on every block's `full`), so a slot may be refilled only once the consumers
// of every block of the cluster released it: they arrive on each block's `empty`. The includer launches
// the blocks as clusters (__cluster_dims__), syncs the cluster after ring_init, and maps B with a box of
// BN / CLUSTER_M columns.
//
// SPLIT_B (default 0; GEMM step 9 sets it): 0, the producer splits each B tile in the ring once it lands
// (split_b_tile) and releases it on `ready`; 1, B arrives already split, by the copy engine, from a
// workspace that a kernel of the includer's wrote before this one ran (big and small, each K-major): the
// B map is then two maps, m[0] the big copy and m[1] the small one, and the producer only issues copies.
// The split costs shared-memory bandwidth in the ring (it reads a tile and writes two, with bank conflicts,
// beside the wgmmas' reads of B) and sits on the producer's path; in global memory it is one elementwise
// pass over B per launch. B's copies complete on `ready` (A's, as before, on `full`), so the consumers wait
// as they do for SPLIT_B=0: with a wait on `full` alone, ptxas serialized the wgmmas (C7511) with a
// cluster and the persistent loop at STAGES 4.
#pragma once
#include "common/gemm_common.cuh"
#include "common/hopper.cuh"
#include "common/tf32x3.cuh"

#define CONSUMERS (BM / 64)
// PRODUCER_WGS (default 1): producer warpgroups. The implicit-GEMM convolutions (kernels_cu/conv/) gather
// their operands element by element, more work than one warp per scheduler keeps up with, and run 2; with
// more than one, a kernel issues its own copies (load_k_block is written for 128 producer threads).
#ifndef PRODUCER_WGS
#define PRODUCER_WGS 1
#endif
#define PRODUCER_THREADS (128 * PRODUCER_WGS)
#define THREADS (128 * (CONSUMERS + PRODUCER_WGS))
#define A_PITCH (BM + 8)                 // floats per k-row of the A tile: rows 32 bytes apart mod 128
#define B_COPIES (PRECISION == 3 ? 2 : 1)  // big (and small) B tiles per stage
#define A_TILE_BYTES (BK * A_PITCH * 4)
#define B_TILE_BYTES (BN * BK * 4)
#define NACC (BN / 2)                    // accumulator registers per consumer thread
#define PATH_TMA_A 1                     // bits of `paths`: this operand comes by the copy engine
#define PATH_TMA_B 2
// A by four phase maps (PATH_PHASED_A), since its leading dimension ld is not a multiple of 4: map r
// covers the k rows r, r + 4, ... with a stride of 4 ld floats, a multiple of 16 bytes, from the
// 16-byte aligned address at or below row r's first element, which therefore sits
// lead_r = (r ld) % 4 floats into the map's inner dimension (ld % 4 is in bits 4-5 of `paths`). A box's
// inner coordinate must itself be 16-byte aligned (else the copy engine faults: an illegal
// instruction), so it starts at m0 and phase r's rows land lead_r floats further on; phase r's box is
// the r-th quarter of the tile's k rows. The consumers read through both permutations (ARows).
#define PATH_PHASED_A 4
#define PATH_LD_A(p) (((p) >> 4) & 3)
#define PATH_COPY (PATH_TMA_A | PATH_TMA_B)
#define PHASES 4
#ifndef CLUSTER_M
#define CLUSTER_M 1
#endif
#ifndef SPLIT_B
#define SPLIT_B 0
#endif
// setmaxnreg: the producer needs few registers; the consumers get the rest of the SM's 64K.
#define PRODUCER_REGS 40
#define CONSUMER_REGS (CONSUMERS == 2 ? 232 : 240)

static_assert(BK == 32, "a B row is one 128-byte swizzle row of 32 TF32 values");
static_assert(BM == 64 * CONSUMERS && (BN == 64 || BN == 128), "one m64nBNk8 wgmma per consumer and k8 step");
static_assert(PRECISION == 3 || PRECISION == 1, "PRECISION is 3 (3xTF32) or 1 (TF32)");
static_assert(CLUSTER_M == 1 || CLUSTER_M == 2 || CLUSTER_M == 4, "a cluster of 1, 2 or 4 blocks along m");
static_assert(SPLIT_B == 0 || (SPLIT_B == 1 && PRODUCER_WGS == 1), "SPLIT_B is 0 or 1, with one producer warpgroup");

// An operand's maps as a kernel takes them: one, or one per phase (PATH_PHASED_A).
struct OperandMaps {
    CUtensorMap m[PHASES];
};

struct Ring {
    unsigned char* base;  // 1024-byte aligned: the 128-byte swizzle repeats every 8 rows of 128 bytes
    __device__ float* b_big(int s) const { return reinterpret_cast<float*>(base + s * B_TILE_BYTES); }
    __device__ float* b_small(int s) const { return reinterpret_cast<float*>(base + (STAGES + s) * B_TILE_BYTES); }
    __device__ float* a(int s) const {
        return reinterpret_cast<float*>(base + STAGES * B_COPIES * B_TILE_BYTES + s * A_TILE_BYTES);
    }
    // full: the tile (SPLIT_B: A) landed; ready: B is split and fenced (SPLIT_B: B's copies landed);
    // empty: the consumers are done with it.
    __device__ unsigned long long* bars() const {
        return reinterpret_cast<unsigned long long*>(base + STAGES * (B_COPIES * B_TILE_BYTES + A_TILE_BYTES));
    }
    __device__ unsigned long long* full(int s) const { return bars() + s; }
    __device__ unsigned long long* ready(int s) const { return bars() + STAGES + s; }
    __device__ unsigned long long* empty(int s) const { return bars() + 2 * STAGES + s; }
};

// Issue the copies of this block's i-th k-block (k-block kb of the operands) into its slot; each of
// the 128 producer threads arrives on `full` once. a_map and b_map: an operand's map, or its PHASES maps.
__device__ __forceinline__ void load_k_block(const Ring& ring, int i, int kb, int pt, int paths, const CUtensorMap* a_map,
                                             const CUtensorMap* b_map, const float* __restrict__ A,
                                             const float* __restrict__ B, int M, int N, int K, int m0, int n0) {
    const int s = i % STAGES, k0 = kb * BK;
    float* as = ring.a(s);
    float* bs = ring.b_big(s);
    // With SPLIT_B, B's maps are the split copies (B_COPIES of them, PATH_TMA_B always set), landing on `ready`.
    unsigned long long* b_bar = SPLIT_B ? ring.ready(s) : ring.full(s);
    if (SPLIT_B && pt == 0) {
        mbar_expect_tx(b_bar, B_COPIES * B_TILE_BYTES);
        mbar_arrive(b_bar);  // its one arrival, after the bytes it waits for were raised
    }
    if (pt == 0 && (paths & PATH_COPY)) {
        mbar_expect_tx(ring.full(s), ((paths & PATH_TMA_A) ? A_TILE_BYTES : 0) +
                                         ((!SPLIT_B && (paths & PATH_TMA_B)) ? B_TILE_BYTES : 0));
        if (paths & PATH_PHASED_A) {  // boxes (BM + 8) x BK/4: k rows r, r + 4, ... as rows r BK/4, ...
            for (int r = 0; r < PHASES; ++r)
                tma_load_2d(as + r * (BK / PHASES) * A_PITCH, a_map + r, m0, k0 / PHASES, ring.full(s));
        } else if (paths & PATH_TMA_A) {
            tma_load_2d(as, a_map, m0, k0, ring.full(s));  // box (BM + 8) x BK
        }
        if (paths & PATH_TMA_B) {  // box BK x BN / CLUSTER_M, 128-byte swizzle (8-row groups: whole ones per part)
            if constexpr (CLUSTER_M > 1) {
                const int part = cluster_ctarank() * (BN / CLUSTER_M);
                tma_load_2d_multicast(bs + part * BK, b_map, k0, n0 + part, b_bar, (1u << CLUSTER_M) - 1);
#if SPLIT_B && PRECISION == 3
                tma_load_2d_multicast(ring.b_small(s) + part * BK, b_map + 1, k0, n0 + part, b_bar,
                                      (1u << CLUSTER_M) - 1);
#endif
            } else {
                tma_load_2d(bs, b_map, k0, n0, b_bar);
#if SPLIT_B && PRECISION == 3
                tma_load_2d(ring.b_small(s), b_map + 1, k0, n0, b_bar);
#endif
            }
        }
    }
    if (!(paths & PATH_TMA_A)) {
        for (int e = pt; e < BK * BM; e += 128) {  // consecutive threads, consecutive m: coalesced
            const int k = e / BM, m = e % BM;
            const bool ok = m0 + m < M && k0 + k < K;
            cp_async_4(as + k * A_PITCH + m, ok ? A + (size_t)(k0 + k) * M + m0 + m : A, ok);
        }
    }
    if (!SPLIT_B && !(paths & PATH_TMA_B)) {  // thread pt: k = pt % BK of rows pt / BK, + 128 / BK, ...: consecutive k
        const int k = pt % BK;
        const bool k_ok = k0 + k < K;
        const float* src = B + (size_t)(n0 + pt / BK) * K + k0 + k;
#pragma unroll 4
        for (int n = pt / BK; n < BN; n += 128 / BK, src += (size_t)(128 / BK) * K) {
            const bool ok = k_ok && n0 + n < N;
            // Where the copy engine's 128-byte swizzle puts (n, k): 16-byte chunk k/4 of row n moves to k/4 ^ n%8.
            cp_async_4(bs + n * BK + (((k >> 2) ^ (n & 7)) << 2) + (k & 3), ok ? src : B, ok);
        }
    }
    if ((paths & (PATH_TMA_A | PATH_TMA_B)) == (PATH_TMA_A | PATH_TMA_B))
        mbar_arrive(ring.full(s));
    else
        mbar_arrive_cp_async(ring.full(s));
}

// B tile -> big (rounded to TF32 in place) and small = tf32(x - big), elementwise, so the swizzled
// layout is kept as it is.
__device__ __forceinline__ void split_b_tile(const Ring& ring, int s, int pt) {
    float4* big = reinterpret_cast<float4*>(ring.b_big(s));
#if PRECISION == 3
    float4* small = reinterpret_cast<float4*>(ring.b_small(s));
#endif
#pragma unroll
    for (int i = pt; i < B_TILE_BYTES / 16; i += PRODUCER_THREADS) {
        const float4 x = big[i];
        unsigned h[4], l[4];
        split(x.x, h[0], l[0]);
        split(x.y, h[1], l[1]);
        split(x.z, h[2], l[2]);
        split(x.w, h[3], l[3]);
        big[i] = make_float4(__uint_as_float(h[0]), __uint_as_float(h[1]), __uint_as_float(h[2]), __uint_as_float(h[3]));
#if PRECISION == 3
        small[i] = make_float4(__uint_as_float(l[0]), __uint_as_float(l[1]), __uint_as_float(l[2]), __uint_as_float(l[3]));
#endif
    }
}

// NARROW: an n128 tile of which only the first 64 columns exist runs m64n64 (half the tensor-core time).
template <bool NARROW, int N_ACC>
__device__ __forceinline__ void wgmma_k8(float (&d)[N_ACC], const unsigned (&a)[4], unsigned long long desc, int scale_d) {
    if constexpr (N_ACC == 64 && !NARROW) wgmma_m64n128k8(d, a, desc, scale_d);
    else wgmma_m64n64k8(d, a, desc, scale_d);
}

// A consumer thread's A fragments for one k-block: BK/8 k8 steps of 4 TF32 values, big (and small).
struct AFrag {
    unsigned big[BK / 8][4];
#if PRECISION == 3
    unsigned sml[BK / 8][4];
#endif
};

// The k-blocks this block accumulates: all of them, or with split-K (gridDim.z > 1) its share.
struct KRange {
    int first, count;
    __device__ explicit KRange(int K) {
        const int k_blocks = (K + BK - 1) / BK, per = (k_blocks + gridDim.z - 1) / gridDim.z;
        first = blockIdx.z * per;
        count = max(0, min(k_blocks, first + per) - first);
    }
    // Slice blockIdx.z of `per` k-blocks each (the host sized the grid so that no slice is empty).
    __device__ KRange(int K, int per) {
        const int k_blocks = (K + BK - 1) / BK;
        first = blockIdx.z * per;
        count = max(0, min(k_blocks, first + per) - first);
    }
};

__device__ __forceinline__ void wait_stage(const Ring& ring, int i) {
    const int s = i % STAGES;
    const unsigned parity = (i / STAGES) & 1;
    mbar_wait(ring.full(s), parity);  // orders the A tile's arrival for these threads' own loads
    mbar_wait(ring.ready(s), parity);
}

// A consumer thread's A fragments for one k-block: k rows 8ks + t and 8ks + t + 4 at `row`. With phased
// A, k row k is tile row (k % 4) BK/4 + k / 4 and `lead` (phase t's lead_t) floats further on, so not
// 8-byte aligned: two 4-byte loads.
template <bool PHASED>
__device__ __forceinline__ void load_a(const float* as, int row, int t, int lead, AFrag& f) {
    const float* lo_row = as + (PHASED ? t * (BK / PHASES) : t) * A_PITCH + row + (PHASED ? lead : 0);
    const float* hi_row = lo_row + (PHASED ? 1 : 4) * A_PITCH;
#pragma unroll
    for (int ks = 0; ks < BK / 8; ++ks) {
        const int at = ks * (PHASED ? 2 : 8) * A_PITCH;
        const float2 lo = PHASED ? make_float2(lo_row[at], lo_row[at + 1]) : *reinterpret_cast<const float2*>(lo_row + at);
        const float2 hi = PHASED ? make_float2(hi_row[at], hi_row[at + 1]) : *reinterpret_cast<const float2*>(hi_row + at);
#if PRECISION == 3
        split(lo.x, f.big[ks][0], f.sml[ks][0]);
        split(lo.y, f.big[ks][1], f.sml[ks][1]);
        split(hi.x, f.big[ks][2], f.sml[ks][2]);
        split(hi.y, f.big[ks][3], f.sml[ks][3]);
#else
        f.big[ks][0] = to_tf32(lo.x);
        f.big[ks][1] = to_tf32(lo.y);
        f.big[ks][2] = to_tf32(hi.x);
        f.big[ks][3] = to_tf32(hi.y);
#endif
    }
}

// One k-block's wgmmas into d, committed as one group; `accumulate` false starts d afresh.
template <bool NARROW>
__device__ __forceinline__ void issue_k_block(float (&d)[NACC], const AFrag& f, const Ring& ring, int s,
                                              bool accumulate) {
    const unsigned long long big = wgmma_desc_sw128(ring.b_big(s));
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < BK / 8; ++ks) {
        const unsigned long long step = (ks * 32) >> 4;  // 32 bytes further along k, in 16-byte units
#if PRECISION == 3
        const unsigned long long small = wgmma_desc_sw128(ring.b_small(s));
        wgmma_k8<NARROW>(d, f.sml[ks], big + step, ks > 0 || accumulate);  // small terms first
        wgmma_k8<NARROW>(d, f.big[ks], small + step, 1);
        wgmma_k8<NARROW>(d, f.big[ks], big + step, 1);
#else
        wgmma_k8<NARROW>(d, f.big[ks], big + step, 1);
#endif
    }
    wgmma_commit();
}

// Barriers of the ring, by thread 0, before the block's __syncthreads.
__device__ __forceinline__ void ring_init(const Ring& ring, int paths, const CUtensorMap* a_map,
                                          const CUtensorMap* b_map) {
    for (int s = 0; s < STAGES; ++s) {
        mbar_init(ring.full(s), PRODUCER_THREADS);
        mbar_init(ring.ready(s), SPLIT_B ? 1 : PRODUCER_THREADS);  // SPLIT_B: load_k_block's thread 0
        mbar_init(ring.empty(s), CONSUMERS * 4 * CLUSTER_M);  // one arrival per consumer warp of the cluster
    }
    mbar_init_fence();
    for (int r = 0; r < ((paths & PATH_PHASED_A) ? PHASES : 1); ++r)
        if (paths & PATH_TMA_A) tma_prefetch_map(a_map + r);
    if (paths & PATH_TMA_B) tma_prefetch_map(b_map);
    if (SPLIT_B && B_COPIES == 2 && (paths & PATH_TMA_B)) tma_prefetch_map(b_map + 1);
}

// Producer: fill the ring STAGES deep, then per k-block: wait for its tile, split B, release it to
// the consumers, and refill the slot the consumers finished last. The split stays one k-block ahead
// of the consumers; the copies STAGES - 1 ahead. With SPLIT_B (B split already) it only refills each
// slot once the consumers released it, STAGES ahead. The stream is `total` iterations long; load(g) issues
// iteration g's copies (a block that loops over tiles streams them all, so the next tile's copies are in
// flight while the consumers finish this one). With a cluster, the producer waits at the end until every
// block's consumers released the last slots: their arrivals on this block's barriers have then landed,
// and the block may exit.
template <class Load>
__device__ __forceinline__ void produce_stream(const Ring& ring, int total, int wt, Load&& load) {
    const int first = total < STAGES ? total : STAGES;
    for (int i = 0; i < first; ++i) load(i);
    if constexpr (SPLIT_B) {
        for (int i = STAGES; i < total; ++i) {
            const int done = i - STAGES;
            mbar_wait(ring.empty(done % STAGES), (done / STAGES) & 1);
            load(i);
        }
    } else {
        for (int i = 0; i < total; ++i) {
            const int s = i % STAGES;
            mbar_wait(ring.full(s), (i / STAGES) & 1);
            split_b_tile(ring, s, wt);
            fence_proxy_async();
            mbar_arrive(ring.ready(s));
            const int done = i - 1;
            if (done >= 0 && done + STAGES < total) {
                mbar_wait(ring.empty(done % STAGES), (done / STAGES) & 1);
                load(done + STAGES);
            }
        }
    }
    if constexpr (CLUSTER_M > 1)
        for (int i = total > STAGES ? total - STAGES : 0; i < total; ++i) mbar_wait(ring.empty(i % STAGES), (i / STAGES) & 1);
}

__device__ __forceinline__ void produce(const Ring& ring, const KRange& kr, int wt, int paths, const CUtensorMap* a_map,
                                        const CUtensorMap* b_map, const float* __restrict__ A,
                                        const float* __restrict__ B, int M, int N, int K, int m0, int n0) {
    produce_stream(ring, kr.count, wt, [&](int i) {
        load_k_block(ring, i, kr.first + i, wt, paths, a_map, b_map, A, B, M, N, K, m0, n0);
    });
}

// A consumer warp (lane 0) is done with slot s: every block of the cluster may refill it.
__device__ __forceinline__ void release_stage(const Ring& ring, int s) {
    if constexpr (CLUSTER_M > 1) {
#pragma unroll
        for (int r = 0; r < CLUSTER_M; ++r) mbar_arrive_cluster(ring.empty(s), r);
    } else {
        mbar_arrive(ring.empty(s));
    }
}

// The tile row of a consumer thread's fragment row g; fragment row g + 8 is row + 1.
__device__ __forceinline__ int consumer_row(int wg, int wt) { return (wg - PRODUCER_WGS) * 64 + (wt / 32) * 16 + 2 * (wt % 32 / 4); }

// One consumer loop per kind of tile, each with its own partial sum written whole every k-block (a
// partial sum that lived across k-blocks would take registers from the wgmma pipeline: ptxas then
// serializes it, C7511). NARROW: m64n64, acc's second half stays 0. PHASED: A by phase maps.
template <bool NARROW, bool PHASED>
__device__ __forceinline__ void consume_k_blocks(float (&acc)[NACC], const Ring& ring, const KRange& kr, int row,
                                                 int lane, int lead, int g0) {
    // The slot and its phase parity, advanced one k-block at a time (computing them from g0 + i costs
    // registers that, with a cluster and a tile loop, ptxas took from the wgmma pipeline: C7511).
    int s = g0 % STAGES;
    unsigned parity = (g0 / STAGES) & 1;
    for (int i = 0; i < kr.count; ++i) {
        mbar_wait(ring.full(s), parity);
        mbar_wait(ring.ready(s), parity);
        AFrag f;
        load_a<PHASED>(ring.a(s), row, lane % 4, lead, f);
#if PRECISION == 3
        float part[NACC];
        issue_k_block<NARROW>(part, f, ring, s, false);
#else
        issue_k_block<NARROW>(acc, f, ring, s, true);
#endif
        wgmma_wait<0>();
        __syncwarp();
        if (lane == 0) release_stage(ring, s);
#if PRECISION == 3
#pragma unroll
        for (int r = 0; r < (NARROW ? NACC / 2 : NACC); ++r) acc[r] += part[r];  // round-to-nearest, outside the tensor core
#endif
        if (++s == STAGES) {
            s = 0;
            parity ^= 1;
        }
    }
}

// Consumer: this thread's fragment of the block's C tile over the k-blocks of kr, into acc. Uniform per
// warpgroup: `idle` (its 64 rows lie past M) only keeps the ring turning; `narrow` (the tile's columns
// past 64 lie past N) runs m64n64. g0: the ring's iterations before this tile's first k-block (a block
// that loops over tiles keeps the ring turning across them).
__device__ __forceinline__ void consume(float (&acc)[NACC], const Ring& ring, const KRange& kr, int wg, int wt,
                                        int paths = 0, bool idle = false, bool narrow = false, int g0 = 0) {
    const int lane = wt % 32;
    const int row = consumer_row(wg, wt);
#pragma unroll
    for (int r = 0; r < NACC; ++r) acc[r] = 0.0f;
    if (idle) {
        for (int i = 0; i < kr.count; ++i) {
            wait_stage(ring, g0 + i);
            __syncwarp();
            if (lane == 0) release_stage(ring, (g0 + i) % STAGES);
        }
        return;
    }
    const int lead = ((lane % 4) * PATH_LD_A(paths)) & 3;  // phase t = lane % 4's lead_t
    if (paths & PATH_PHASED_A) {
        if (narrow) consume_k_blocks<true, true>(acc, ring, kr, row, lane, lead, g0);
        else consume_k_blocks<false, true>(acc, ring, kr, row, lane, lead, g0);
    } else {
        if (narrow) consume_k_blocks<true, false>(acc, ring, kr, row, lane, lead, g0);
        else consume_k_blocks<false, false>(acc, ring, kr, row, lane, lead, g0);
    }
}

// Walks a consumer thread's C fragment: fn(n, v0, v1) per tile column n (relative to the block's n0),
// v0 at tile row `consumer_row` and v1 at the row after it. acc[4j + h] is (row, 8j + 2t + h),
// acc[4j + 2 + h] is (row + 1, 8j + 2t + h).
template <class Fn>
__device__ __forceinline__ void for_each_pair(const float (&acc)[NACC], int wt, Fn&& fn) {
    const int t = wt % 4;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) fn(8 * j + 2 * t + h, acc[4 * j + h], acc[4 * j + 2 + h]);
}
