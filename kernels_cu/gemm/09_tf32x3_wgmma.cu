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
//         (generic -> async proxy) before the consumers may read it. wgmma takes TF32 operands from
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
//         STAGES in {2..6}: the ring's depth; PRECISION in {3, 1}. Defaults BM=128 BN=128 STAGES=4
//         PRECISION=3 (nnbench/registry.py). Shared memory: STAGES * (BK*(BM+8) + BN*BK*(1 or 2)) * 4
//         bytes of dynamic shared memory, plus 1 KiB of alignment.
// Sizes:  any M, N, K >= 1. An operand goes by the copy engine when its leading dimension is a
//         multiple of 4 (the tensor map's 16-byte stride rule); otherwise the host first copies it,
//         inside the timed launch, to a buffer whose leading dimension is rounded up to a multiple of
//         4 (pad_leading_dim below) and maps that. The producer's 4-byte cp.async path into the same
//         layout remains for an operand that cannot be mapped even so (`paths` says which; the
//         table names the path).
// Split-K: where the tiles fill less than half the SMs (Net 8's weight gradients: K = 4096, 16 or
//         fewer tiles), the host launches gridDim.z slices of K; scale_c (below) first sets
//         C = beta C and each slice adds alpha times its share with atomics.
// Launch: THREADS = 128 * (BM/64 + 1); grid (ceil(M/BM), ceil(N/BN), splits); sm_90a only.
#include "common/gemm_common.cuh"
#include "common/hopper.cuh"
#include "common/tf32x3.cuh"

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

#define CONSUMERS (BM / 64)
#define THREADS (128 * (CONSUMERS + 1))
#define A_PITCH (BM + 8)                 // floats per k-row of the A tile: rows 32 bytes apart mod 128
#define B_COPIES (PRECISION == 3 ? 2 : 1)  // big (and small) B tiles per stage
#define A_TILE_BYTES (BK * A_PITCH * 4)
#define B_TILE_BYTES (BN * BK * 4)
#define NACC (BN / 2)                    // accumulator registers per consumer thread
#define PATH_TMA_A 1                     // bits of `paths`: this operand comes by the copy engine
#define PATH_TMA_B 2
// setmaxnreg: the producer needs few registers; the consumers get the rest of the SM's 64K.
#define PRODUCER_REGS 40
#define CONSUMER_REGS (CONSUMERS == 2 ? 232 : 240)

static_assert(BK == 32, "a B row is one 128-byte swizzle row of 32 TF32 values");
static_assert(BM == 64 * CONSUMERS && (BN == 64 || BN == 128), "one m64nBNk8 wgmma per consumer and k8 step");
static_assert(PRECISION == 3 || PRECISION == 1, "PRECISION is 3 (3xTF32) or 1 (TF32)");

struct Ring {
    unsigned char* base;  // 1024-byte aligned: the 128-byte swizzle repeats every 8 rows of 128 bytes
    __device__ float* b_big(int s) const { return reinterpret_cast<float*>(base + s * B_TILE_BYTES); }
    __device__ float* b_small(int s) const { return reinterpret_cast<float*>(base + (STAGES + s) * B_TILE_BYTES); }
    __device__ float* a(int s) const {
        return reinterpret_cast<float*>(base + STAGES * B_COPIES * B_TILE_BYTES + s * A_TILE_BYTES);
    }
    // full: the tile landed; ready: B is split and fenced; empty: the consumers are done with it.
    __device__ unsigned long long* bars() const {
        return reinterpret_cast<unsigned long long*>(base + STAGES * (B_COPIES * B_TILE_BYTES + A_TILE_BYTES));
    }
    __device__ unsigned long long* full(int s) const { return bars() + s; }
    __device__ unsigned long long* ready(int s) const { return bars() + STAGES + s; }
    __device__ unsigned long long* empty(int s) const { return bars() + 2 * STAGES + s; }
};

// Issue the copies of this block's i-th k-block (k-block kb of the operands) into its slot; each of
// the 128 producer threads arrives on `full` once.
__device__ __forceinline__ void load_k_block(const Ring& ring, int i, int kb, int pt, int paths, const CUtensorMap* a_map,
                                             const CUtensorMap* b_map, const float* __restrict__ A,
                                             const float* __restrict__ B, int M, int N, int K, int m0, int n0) {
    const int s = i % STAGES, k0 = kb * BK;
    float* as = ring.a(s);
    float* bs = ring.b_big(s);
    if (pt == 0 && paths) {
        mbar_expect_tx(ring.full(s), ((paths & PATH_TMA_A) ? A_TILE_BYTES : 0) + ((paths & PATH_TMA_B) ? B_TILE_BYTES : 0));
        if (paths & PATH_TMA_A) tma_load_2d(as, a_map, m0, k0, ring.full(s));  // box (BM + 8) x BK
        if (paths & PATH_TMA_B) tma_load_2d(bs, b_map, k0, n0, ring.full(s));  // box BK x BN, 128-byte swizzle
    }
    if (!(paths & PATH_TMA_A)) {
        for (int e = pt; e < BK * BM; e += 128) {  // consecutive threads, consecutive m: coalesced
            const int k = e / BM, m = e % BM;
            const bool ok = m0 + m < M && k0 + k < K;
            cp_async_4(as + k * A_PITCH + m, ok ? A + (size_t)(k0 + k) * M + m0 + m : A, ok);
        }
    }
    if (!(paths & PATH_TMA_B)) {
        for (int e = pt; e < BN * BK; e += 128) {  // consecutive threads, consecutive k
            const int n = e / BK, k = e % BK;
            const bool ok = n0 + n < N && k0 + k < K;
            // Where the copy engine's 128-byte swizzle puts (n, k): 16-byte chunk k/4 of row n moves to k/4 ^ n%8.
            float* dst = bs + n * BK + (((k >> 2) ^ (n & 7)) << 2) + (k & 3);
            cp_async_4(dst, ok ? B + (size_t)(n0 + n) * K + k0 + k : B, ok);
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
    for (int i = pt; i < B_TILE_BYTES / 16; i += 128) {
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

template <int N_ACC>
__device__ __forceinline__ void wgmma_k8(float (&d)[N_ACC], const unsigned (&a)[4], unsigned long long desc, int scale_d) {
    if constexpr (N_ACC == 64) wgmma_m64n128k8(d, a, desc, scale_d);
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
};

__device__ __forceinline__ void wait_stage(const Ring& ring, int i) {
    const int s = i % STAGES;
    const unsigned parity = (i / STAGES) & 1;
    mbar_wait(ring.full(s), parity);  // orders the A tile's arrival for these threads' own loads
    mbar_wait(ring.ready(s), parity);
}

__device__ __forceinline__ void load_a(const float* as, int row, int t, AFrag& f) {
#pragma unroll
    for (int ks = 0; ks < BK / 8; ++ks) {
        const float2 lo = *reinterpret_cast<const float2*>(as + (8 * ks + t) * A_PITCH + row);
        const float2 hi = *reinterpret_cast<const float2*>(as + (8 * ks + t + 4) * A_PITCH + row);
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
__device__ __forceinline__ void issue_k_block(float (&d)[NACC], const AFrag& f, const Ring& ring, int s,
                                              bool accumulate) {
    const unsigned long long big = wgmma_desc_sw128(ring.b_big(s));
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < BK / 8; ++ks) {
        const unsigned long long step = (ks * 32) >> 4;  // 32 bytes further along k, in 16-byte units
#if PRECISION == 3
        const unsigned long long small = wgmma_desc_sw128(ring.b_small(s));
        wgmma_k8(d, f.sml[ks], big + step, ks > 0 || accumulate);  // small terms first
        wgmma_k8(d, f.big[ks], small + step, 1);
        wgmma_k8(d, f.big[ks], big + step, 1);
#else
        wgmma_k8(d, f.big[ks], big + step, 1);
#endif
    }
    wgmma_commit();
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm(int M, int N, int K, float alpha, const float* __restrict__ A, const float* __restrict__ B, float beta,
     float* __restrict__ C, const __grid_constant__ CUtensorMap a_map, const __grid_constant__ CUtensorMap b_map,
     int paths) {
    extern __shared__ unsigned char smem_raw[];
    // Aligned by pointer arithmetic on the shared array: an integer cast would lose the address space
    // and turn every access into a generic one.
    const Ring ring{smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023)};
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const int wg = threadIdx.x / 128, wt = threadIdx.x % 128;

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(ring.full(s), 128);
            mbar_init(ring.ready(s), 128);
            mbar_init(ring.empty(s), CONSUMERS * 4);  // one arrival per consumer warp
        }
        mbar_init_fence();
        if (paths & PATH_TMA_A) tma_prefetch_map(&a_map);
        if (paths & PATH_TMA_B) tma_prefetch_map(&b_map);
    }
    __syncthreads();

    if (wg == 0) {
        // Producer: fill the ring STAGES deep, then per k-block: wait for its tile, split B, release
        // it to the consumers, and refill the slot the consumers finished last. The split stays one
        // k-block ahead of the consumers; the copies STAGES - 1 ahead.
        regs_dealloc<PRODUCER_REGS>();
        const KRange kr(K);
        const int first = kr.count < STAGES ? kr.count : STAGES;
        for (int i = 0; i < first; ++i)
            load_k_block(ring, i, kr.first + i, wt, paths, &a_map, &b_map, A, B, M, N, K, m0, n0);
        for (int i = 0; i < kr.count; ++i) {
            const int s = i % STAGES;
            mbar_wait(ring.full(s), (i / STAGES) & 1);
            split_b_tile(ring, s, wt);
            fence_proxy_async();
            mbar_arrive(ring.ready(s));
            const int done = i - 1;
            if (done >= 0 && done + STAGES < kr.count) {
                mbar_wait(ring.empty(done % STAGES), (done / STAGES) & 1);
                load_k_block(ring, done + STAGES, kr.first + done + STAGES, wt, paths, &a_map, &b_map, A, B, M, N, K,
                             m0, n0);
            }
        }
        return;
    }

    regs_alloc<CONSUMER_REGS>();
    const KRange kr(K);  // per role: computed before the split, it was spilled
    const int lane = wt % 32, warp = wt / 32, g = lane / 4, t = lane % 4;
    const int row = (wg - 1) * 64 + warp * 16 + 2 * g;  // tile row of fragment row g; fragment row g + 8 is row + 1
    float acc[NACC];
#pragma unroll
    for (int r = 0; r < NACC; ++r) acc[r] = 0.0f;
#if PRECISION == 3
    float part[NACC];
#endif

    for (int i = 0; i < kr.count; ++i) {
        const int s = i % STAGES;
        wait_stage(ring, i);
        AFrag f;
        load_a(ring.a(s), row, t, f);
#if PRECISION == 3
        issue_k_block(part, f, ring, s, false);
#else
        issue_k_block(acc, f, ring, s, true);
#endif
        wgmma_wait<0>();
        __syncwarp();
        if (lane == 0) mbar_arrive(ring.empty(s));
#if PRECISION == 3
#pragma unroll
        for (int r = 0; r < NACC; ++r) acc[r] += part[r];  // round-to-nearest, outside the tensor core
#endif
    }

    // Epilogue: d[4j + h] is (row, 8j + 2t + h), d[4j + 2 + h] is (row + 1, 8j + 2t + h): the two
    // rows are adjacent in column-major C, one 8-byte store where M is even.
    const int gm = m0 + row;
    if (gridDim.z > 1) {  // split-K: the host set C = beta C; each split adds alpha times its share
        if (kr.count == 0) return;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int gn = n0 + 8 * j + 2 * t + h;
                if (gn >= N || gm >= M) continue;
                float* c = C + (size_t)gn * M + gm;
                atomicAdd(c, alpha * acc[4 * j + h]);
                if (gm + 1 < M) atomicAdd(c + 1, alpha * acc[4 * j + 2 + h]);
            }
        return;
    }
    const bool pair = (M & 1) == 0 && gm + 1 < M;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int gn = n0 + 8 * j + 2 * t + h;
            if (gn >= N || gm >= M) continue;
            float* c = C + (size_t)gn * M + gm;
            const float v0 = acc[4 * j + h], v1 = acc[4 * j + 2 + h];
            if (pair) {
                float2 r = make_float2(alpha * v0, alpha * v1);
                if (beta != 0.0f) {
                    const float2 old = *reinterpret_cast<const float2*>(c);
                    r.x += beta * old.x;
                    r.y += beta * old.y;
                }
                *reinterpret_cast<float2*>(c) = r;
            } else {
                c[0] = gemm_epilogue(v0, alpha, beta, c);
                if (gm + 1 < M) c[1] = gemm_epilogue(v1, alpha, beta, c + 1);
            }
        }
}

// The fallback for a leading dimension that breaks the tensor maps' 16-byte stride rule: the host
// has the operand copied, inside the timed launch, to one whose leading dimension `ld` is rounded up
// to a multiple of 4, and maps that. The pad rows are never read (the map's size excludes them).
extern "C" __global__ void pad_leading_dim(const float* __restrict__ src, float* __restrict__ dst, int rows, int cols,
                                           int ld) {
    const long long total = (long long)rows * cols;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
        const long long c = i / rows;
        dst[c * ld + (i - c * rows)] = src[i];
    }
}

// Split-K's first pass: C = beta C (exactly 0 where beta = 0, whatever C held), before the splits add.
extern "C" __global__ void scale_c(float* __restrict__ C, long long count, float beta) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < count; i += (long long)gridDim.x * blockDim.x)
        C[i] = beta == 0.0f ? 0.0f : beta * C[i];
}
