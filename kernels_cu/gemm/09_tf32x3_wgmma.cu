// Step 9: Hopper's own path. Bulk tensor copies into an mbarrier-guarded ring, a producer
// warpgroup feeding consumer warpgroups, and wgmma (3xTF32, or one TF32 product).
//
// Idea:   step 8 issues mma.sync (HMMA in SASS): every warp loads its fragments from shared memory
//         and waits for its own MMAs, so the tensor cores idle between a warp's loads and math.
//         Hopper decouples the three: the copy engine (TMA) moves whole tiles global -> shared on
//         its own, completing on an mbarrier; wgmma reads B straight from shared memory and runs
//         asynchronously for a whole warpgroup (HGMMA in SASS); and the roles split: one producer
//         warpgroup keeps a STAGES-deep ring filled while two consumer warpgroups keep the tensor
//         cores busy, each hiding the other's bookkeeping.
//         3xTF32 as in step 8: x = big + small, products small*big + big*small + big*big. B must
//         exist in shared memory twice (big, small: the hardware would simply drop the low mantissa
//         bits), so the producer warpgroup splits each B tile in place once it lands, then fences
//         (generic -> async proxy) before the consumers may read it; or, with SPLIT_B=1, a kernel of
//         this module (`split_b`) splits the whole of B into a workspace first, in the same launch
//         sequence, and the copy engine brings both copies (see SPLIT_B below). wgmma takes TF32 operands from
//         shared memory only K-major, and A is M-major, so A goes through registers: a consumer
//         loads its fragment with conflict-free 8-byte loads (rows of the A tile padded by 8
//         floats; the fragment's rows g, g+8 are mapped to adjacent rows 2g, 2g+1, a free
//         permutation undone by the epilogue) and splits it there.
//         Accuracy: the tensor core's accumulation truncates (step 8 measured 2.9e-5 at K = 4096
//         with the running sum inside the MMA), so each BK slice's 3 x BK/8 products go into a
//         fresh partial sum (wgmma's scale-d = 0) that is added to the running sum with FADD.
//         PRECISION=1 keeps one big*big product, accumulated in the MMA: plain TF32.
// Source: PTX ISA 8.x (cp.async.bulk.tensor, mbarrier, wgmma.mma_async with A in registers,
//         setmaxnreg); CUTLASS's sm90 warp-specialized mainloop; the 3xTF32 of step 8.
// Params: BM in {64, 128}: block rows, 64 per consumer warpgroup; BN in {64, 128}: block columns
//         (one wgmma m64nBNk8 per k8 step); BK = 32: one 128-byte swizzle row of TF32 per B row;
//         STAGES in {2..6}: the ring's depth; PRECISION in {3, 1}; ADAPT in {1, 0}: whether the host
//         picks BN and split-K per shape; CLUSTER_M in {1, 2}: blocks per cluster along m, sharing B
//         by multicast (wgmma_mainloop.cuh says how); PERSISTENT in {0, 1}: blocks loop over tiles;
//         SPLIT_K (host side): slices of K asked for, 0 = the host's rule; SPLIT_B in {0, 1}: where B is
//         split into big and small, 0 in the ring by the producer, 1 once per launch in global memory.
//         Defaults BM=128 BN=128 STAGES=4 PRECISION=3 ADAPT=1 CLUSTER_M=1 PERSISTENT=0 SPLIT_B=0
//         (nnbench/registry.py). Shared memory: STAGES * (BK*(BM+8) + BN*BK*(1 or 2)) * 4 bytes of
//         dynamic shared memory, 24 bytes of barriers a stage, plus 1 KiB of alignment (SPLIT_B leaves it
//         as it is: the ring holds both B copies either way).
// SPLIT_B: the in-ring split measured 9% of 4096^3 (no split at all: 1.113 against 1.218 ms, H100): per
//         k-block of a 128x128 tile it reads 16 KB of shared memory and writes 32 KB (with bank conflicts),
//         beside 96 KB of wgmma reads of B, and the consumers wait for it. With SPLIT_B=1 the host launches
//         `split_b` right before `gemm`, every launch (it is part of what is timed, and B may change between
//         launches): B (K x N, leading dimension K) -> big = tf32(B) and, for 3xTF32, small = tf32(B - big),
//         each K-major with leading dimension ldw = K rounded up to 4 (rows K..ldw-1 zero), so that B's
//         maps always meet the 16-byte stride rule: no cp.async path for B, whatever K. The split is
//         common/tf32x3.cuh's, so the products are bit for bit those of SPLIT_B=0. The kernel's B map is
//         then two maps (OperandMaps m[0] big, m[1] small), both multicast with a cluster; the producer
//         issues copies only, B's landing on `ready` (wgmma_mainloop.cuh says why). With PRECISION=1 the
//         workspace holds the rounded B only (big: what SPLIT_B=0 rounds in the ring). The transposed path
//         (WIDE_N) keeps its own split: SPLIT_B is the main kernel's.
// Sizes:  any M, N, K >= 1. An operand goes by the copy engine when its leading dimension is a
//         multiple of 4 (the tensor map's 16-byte stride rule). Otherwise A goes by four phase maps,
//         one per k % 4, each with a stride of 4 lda (wgmma_mainloop.cuh, PATH_PHASED_A): no copy, no
//         extra launch. B cannot (its inner dimension is k, and a box's inner coordinate must be 16-byte
//         aligned): the producer loads it by 4-byte cp.async, as any operand that cannot be mapped
//         (`paths` says which; the table names the path).
//         Small shapes, decided per block at run time: a consumer warpgroup whose 64 rows lie past M
//         issues no wgmma, and a tile whose columns past 64 lie past N runs m64n64.
// Wide:   M <= 128 with N >= 2048 (Net 8's 100x4096x501, 7x4096x101) goes, by the host's choice
//         (nnbench/workloads/gemm/session.py, wide_plan; ADAPT=1), to a kernel of its own: this file built with WIDE_N
//         defined compiles only gemm/09_wide.cuh's `gemm_wide`, C^T = B^T A^T with N on wgmma's m.
// Split-K: where the tiles fill less than half the SMs (Net 8's weight gradients: K = 4096, 16 or
//         fewer tiles), the host launches gridDim.z slices of K, in the same launch: each slice stores
//         its partial tile to a workspace, the slices of a tile meet at a counter, then each sums its
//         share of the tile's elements over all the partials, in slice order (deterministic, no
//         atomics on C), and writes C = alpha sum + beta C. The meeting needs every slice resident at
//         once: the host keeps tiles x slices within the SM count (a block per SM always fits; another
//         kernel holding SMs at the same time could make it wait forever). The counters
//         (`split_sync`, 2 ints per tile) are left zeroed for the next launch.
// Epilogue: one walk of a consumer thread's fragment (`store_fragment`) writes C, or a partial tile.
// Persistent: with PERSISTENT=1 the host launches min(tiles, SMs) blocks and each takes every
//         gridDim-th tile; its producer streams all its tiles' k-blocks through the ring, so the next
//         tile's copies are in flight during this tile's last k-blocks and epilogue. Never with split-K.
// Launch: THREADS = 128 * (BM/64 + 1); grid (ceil(M/BM) rounded up to whole clusters, ceil(N/BN),
//         splits), or (min(tiles, SMs), 1, 1) persistent; clusters of (CLUSTER_M, 1, 1); sm_90a only.
//         With SPLIT_B=1, first `split_b` (SPLIT_B_THREADS a block, a grid-stride loop) on the same stream.
#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 32
#endif
#ifndef STAGES
#define STAGES 4
#endif
#ifndef PRECISION
#define PRECISION 3
#endif
#ifndef CLUSTER_M
#define CLUSTER_M 1
#endif
#ifndef PERSISTENT
#define PERSISTENT 0
#endif
#ifndef SPLIT_B
#define SPLIT_B 0
#endif
#define SPLIT_B_THREADS 256
#ifndef ADAPT
#define ADAPT 1  // host side only: the launch picks BN and split-K per shape (nnbench/workloads/gemm/session.py, step9_tile)
#endif

__device__ __forceinline__ int load_acquire(const int* p) {
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// Split-K's meeting: the slices of a tile count themselves in at count[0] and wait for all; `sync` is the
// block's barrier over the threads that stored a partial, `leader` one of them. As cooperative groups' grid
// sync: the barrier orders the block's stores before the leader's, whose fence (cumulative) makes them all
// visible at gpu scope before its count. A fence in every thread instead (membar the top stall on
// 100x4096x501) measured 2-3% slower on the split shapes (lab/journal/step9-wide.md).
template <class Sync>
__device__ __forceinline__ void split_k_meet(int* count, int splits, bool leader, Sync&& sync) {
    sync();
    if (leader) {
        __threadfence();
        atomicAdd(count, 1);
        while (load_acquire(count) < splits) {
        }
    }
    sync();
}
// ... and leave once done reading the partials: the tile's last slice zeroes both counters (count[1]: slices
// done) for the next launch.
template <class Sync>
__device__ __forceinline__ void split_k_leave(int* count, int splits, bool leader, Sync&& sync) {
    sync();
    if (leader && atomicAdd(count + 1, 1) == splits - 1) {
        count[0] = 0;
        count[1] = 0;
    }
}

#ifdef WIDE_N  // the transposed path for small M and wide N: its own kernel, the module's only one
#include "gemm/09_wide.cuh"
#else
#include "common/wgmma_mainloop.cuh"

// Barrier 1: the consumers (after the producer returned); 0 is __syncthreads.
__device__ __forceinline__ void consumers_sync() { asm volatile("bar.sync 1, %0;" ::"n"(CONSUMERS * 128) : "memory"); }

// D = alpha acc + beta D for a consumer thread's fragment: rows gm, gm + 1 (gm even) of a column-major D
// with leading dimension ld, columns n0 + fragment column, within rows x cols. The two rows are adjacent:
// one 8-byte store where ld is even.
__device__ __forceinline__ void store_fragment(const float (&acc)[NACC], int wt, float* D, int ld, int rows, int cols,
                                               int gm, int n0, float alpha, float beta) {
    if (gm >= rows) return;
    const bool pair = (ld & 1) == 0 && gm + 1 < rows;
    for_each_pair(acc, wt, [&](int n, float v0, float v1) {
        if (n0 + n >= cols) return;
        float* d = D + (size_t)(n0 + n) * ld + gm;
        if (pair) {
            float2 r = make_float2(alpha * v0, alpha * v1);
            if (beta != 0.0f) {
                const float2 old = *reinterpret_cast<const float2*>(d);
                r.x += beta * old.x;
                r.y += beta * old.y;
            }
            *reinterpret_cast<float2*>(d) = r;
        } else {
            d[0] = gemm_epilogue(v0, alpha, beta, d);
            if (gm + 1 < rows) d[1] = gemm_epilogue(v1, alpha, beta, d + 1);
        }
    });
}

// Split-K's end: this slice's partial tile to the workspace, the tile's slices meet, then this slice
// sums its share of the tile (elements e of the column-major BM x BN tile) over every slice's partial.
__device__ __forceinline__ void reduce_split_k(const float (&acc)[NACC], int wt, int row, float* __restrict__ C, int M,
                                               int N, int m0, int n0, float alpha, float beta, float* work,
                                               int* __restrict__ split_sync) {
    const int tile = blockIdx.y * gridDim.x + blockIdx.x, splits = gridDim.z;
    float* partials = work + (size_t)tile * splits * (BM * BN);
    store_fragment(acc, wt, partials + (size_t)blockIdx.z * (BM * BN), BM, BM, BN, row, 0, 1.0f, 0.0f);
    int* count = split_sync + 2 * tile;  // slices arrived, slices done
    split_k_meet(count, splits, threadIdx.x == 128, consumers_sync);
    const int share = (BM * BN + splits - 1) / splits;
    const int last = min(BM * BN, (blockIdx.z + 1) * share);
    for (int e = blockIdx.z * share + threadIdx.x - 128; e < last; e += CONSUMERS * 128) {
        const int m = m0 + e % BM, n = n0 + e / BM;
        if (m >= M || n >= N) continue;
        float sum = 0.0f;
#pragma unroll 8
        for (int z = 0; z < splits; ++z) sum += __ldcg(partials + (size_t)z * (BM * BN) + e);
        float* c = C + (size_t)n * M + m;
        *c = gemm_epilogue(sum, alpha, beta, c);
    }
    split_k_leave(count, splits, threadIdx.x == 128, consumers_sync);
}

#if SPLIT_B
// B -> the workspace `work`: big at work, small (3xTF32) at work + ldw N, element (k, n) at k + n ldw. Four
// consecutive k of one column per thread and step: one float4 store per copy (ldw is a multiple of 4, so a
// quad never crosses a column), one float4 load where K is a multiple of 4 and B 16-byte aligned (then
// ldw = K and the quads are B's own), else four guarded loads, zero past K.
extern "C" __global__ void __launch_bounds__(SPLIT_B_THREADS)
split_b(int K, int N, int ldw, const float* __restrict__ B, float* __restrict__ work) {
    const int col_quads = ldw / 4;
    const bool vector = (K & 3) == 0 && (reinterpret_cast<size_t>(B) & 15) == 0;
    const size_t quads = (size_t)col_quads * N;
    float4* big = reinterpret_cast<float4*>(work);
#if PRECISION == 3
    float4* small = big + quads;
#endif
    for (size_t q = (size_t)blockIdx.x * SPLIT_B_THREADS + threadIdx.x; q < quads;
         q += (size_t)gridDim.x * SPLIT_B_THREADS) {
        float x[4];
        if (vector) {
            const float4 v = __ldg(reinterpret_cast<const float4*>(B) + q);
            x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
        } else {
            const size_t n = q / col_quads;
            const int k = (int)(q - n * col_quads) * 4;
            const float* col = B + n * K;
#pragma unroll
            for (int j = 0; j < 4; ++j) x[j] = k + j < K ? __ldg(col + k + j) : 0.0f;
        }
        unsigned h[4], l[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) split(x[j], h[j], l[j]);
        big[q] = make_float4(__uint_as_float(h[0]), __uint_as_float(h[1]), __uint_as_float(h[2]), __uint_as_float(h[3]));
#if PRECISION == 3
        small[q] = make_float4(__uint_as_float(l[0]), __uint_as_float(l[1]), __uint_as_float(l[2]), __uint_as_float(l[3]));
#endif
    }
}
#endif

#if CLUSTER_M > 1
#define CLUSTER_DIMS __cluster_dims__(CLUSTER_M, 1, 1)
#else
#define CLUSTER_DIMS
#endif

extern "C" __global__ void __launch_bounds__(THREADS, 1) CLUSTER_DIMS
gemm(int M, int N, int K, float alpha, const float* __restrict__ A, const float* __restrict__ B, float beta,
     float* __restrict__ C, const __grid_constant__ OperandMaps a_maps, const __grid_constant__ OperandMaps b_maps,
     int paths, int* __restrict__ split_sync, float* __restrict__ split_work) {
    extern __shared__ unsigned char smem_raw[];
    // Aligned by pointer arithmetic on the shared array: an integer cast would lose the address space
    // and turn every access into a generic one.
    const Ring ring{smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023)};
    // The warpgroup by a broadcast from lane 0: provably uniform across the warp, so the consumer loops under
    // its branches (idle warpgroups) keep the ring's slot arithmetic on the uniform datapath (4096^3 ~2%).
    const int wg = __shfl_sync(0xffffffff, threadIdx.x / 128, 0), wt = threadIdx.x % 128;
    // Tiles in m-major order, the m tiles rounded up to whole clusters (a cluster's blocks share n0). A
    // block takes tile `first`, and with PERSISTENT every `stride`-th after it (the host launches fewer
    // blocks than tiles); the pairs of a cluster stay together, since stride and tiles_m are multiples of
    // CLUSTER_M.
    if (threadIdx.x == 0) ring_init(ring, paths, a_maps.m, b_maps.m);
    if constexpr (CLUSTER_M > 1) cluster_sync();
    else __syncthreads();
    // After the barrier: kept live across ring_init, `first` was spilled (STAGES = 3 or 5).
    const int tiles_m = (M + BM * CLUSTER_M - 1) / (BM * CLUSTER_M) * CLUSTER_M, tiles = tiles_m * ((N + BN - 1) / BN);
    const int first = blockIdx.y * gridDim.x + blockIdx.x, stride = PERSISTENT ? gridDim.x * gridDim.y : tiles;

    if (wg == 0) {
        regs_dealloc<PRODUCER_REGS>();
        const KRange kr(K);
        if constexpr (!PERSISTENT) {
            produce(ring, kr, wt, paths, a_maps.m, b_maps.m, A, B, M, N, K, first % tiles_m * BM, first / tiles_m * BN);
        } else {
            // The next copy's k-block and tile, advanced one copy at a time: a division per k-block here
            // (the k-block and tile of iteration g) made 4096^3 8% slower, the producer's instructions per
            // k-block being on the critical path (lab/journal/gemm.md).
            int kb = kr.first, t = first, m0 = first % tiles_m * BM, n0 = first / tiles_m * BN;
            const int mine = first < tiles ? (tiles - first + stride - 1) / stride : 0;
            produce_stream(ring, mine * kr.count, wt, [&](int g) {
                load_k_block(ring, g, kb, wt, paths, a_maps.m, b_maps.m, A, B, M, N, K, m0, n0);
                if (++kb == kr.first + kr.count) {  // a split-K launch is one pass: kr.first may be > 0
                    kb = kr.first;
                    t += stride;
                    m0 = t % tiles_m * BM;
                    n0 = t / tiles_m * BN;
                }
            });
        }
        return;
    }

    regs_alloc<CONSUMER_REGS>();
    const KRange kr(K);  // per role: computed before the split, it was spilled
    const int row = consumer_row(wg, wt);
    auto tile = [&](int t, int g0) {  // g0: the ring's iterations before this tile
        const int m0 = t % tiles_m * BM, n0 = t / tiles_m * BN;
        float acc[NACC];
        consume(acc, ring, kr, wg, wt, paths, m0 + (wg - 1) * 64 >= M, BN == 128 && N - n0 <= 64, g0);
        if (gridDim.z > 1)
            reduce_split_k(acc, wt, row, C, M, N, m0, n0, alpha, beta, split_work, split_sync);
        else
            store_fragment(acc, wt, C, M, M, N, m0 + row, n0, alpha, beta);
    };
    // Without PERSISTENT the ring's iteration count stays a constant (a run-time offset costs the consumer
    // loop 40 instructions per k-block).
    if constexpr (PERSISTENT) {
        for (int t = first, g0 = 0; t < tiles; t += stride, g0 += kr.count) tile(t, g0);
    } else {
        tile(first, 0);
    }
}
#endif  // WIDE_N
