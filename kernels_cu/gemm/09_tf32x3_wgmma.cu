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
//         multiple of 4 (the tensor map's 16-byte stride rule). Otherwise A goes by four phase maps,
//         one per k % 4, each with a stride of 4 lda (wgmma_mainloop.cuh, PATH_PHASED_A): no copy, no
//         extra launch. B cannot (its inner dimension is k, which the phases would shift against A's):
//         where it is large, the host first copies it, inside the timed launch, to a buffer whose
//         leading dimension is rounded up to a multiple of 4 (pad_leading_dim below) and maps that;
//         where it is small, the producer loads it by 4-byte cp.async, which an operand that cannot be
//         mapped at all also takes (`paths` says which; the table names the path).
//         Small shapes, decided per block at run time: a consumer warpgroup whose 64 rows lie past M
//         issues no wgmma, and a tile whose columns past 64 lie past N runs m64n64.
// Split-K: where the tiles fill less than half the SMs (Net 8's weight gradients: K = 4096, 16 or
//         fewer tiles), the host launches gridDim.z slices of K, one launch: the first slice of a tile
//         to finish writes C = alpha acc + beta C and raises the tile's flag; the others wait for it,
//         then add alpha acc with 16-byte atomics (`split_sync`: 3 ints per tile, left zeroed).
// Epilogue: both paths stage the fragments in shared memory and write C down its columns, 16 bytes
//         a lane where the address allows (C is column-major: a fragment's own rows are 8 bytes).
// Launch: THREADS = 128 * (BM/64 + 1); grid (ceil(M/BM), ceil(N/BN), splits); sm_90a only.
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

#include "common/wgmma_mainloop.cuh"

// Named barriers: 0 is __syncthreads; 1 the consumers (after the producer returned); 2, 3 one each.
__device__ __forceinline__ void consumers_sync() { asm volatile("bar.sync 1, %0;" ::"n"(CONSUMERS * 128) : "memory"); }
__device__ __forceinline__ void warpgroup_sync(int wg) { asm volatile("bar.sync %0, 128;" ::"r"(1 + wg) : "memory"); }

__device__ __forceinline__ int load_acquire(const int* p) {
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// A consumer warpgroup's 64 x BN fragment, staged column-major in shared memory (64 floats a column, the
// rows of column c rotated by 8 ((c / 2) % 4), so the fragment's 8-byte writes never share a bank).
__device__ __forceinline__ int staged(int c, int r) { return c * 64 + ((r + 8 * ((c >> 1) & 3)) & 63); }

// C = alpha acc + beta C (add: C += alpha acc, atomically) for one consumer warpgroup's rows gm0 ..
// gm0 + rows - 1: staged, then one warp a column, each lane 4 rows that start on a 16-byte boundary of C
// (the column's first and last lanes take what is left on either side).
__device__ __forceinline__ void write_c(float* stage, const float (&acc)[NACC], int wg, int wt, float* C, int M, int N,
                                        int gm0, int rows, int n0, float alpha, float beta, bool add) {
    const int lane = wt % 32, w = wt / 32;
    const int r0 = 16 * w + 2 * (lane / 4);
    for_each_pair(acc, wt, [&](int c, float v0, float v1) {
        *reinterpret_cast<float2*>(stage + staged(c, r0)) = make_float2(v0, v1);
    });
    warpgroup_sync(wg);
    if (rows <= 0) return;
    for (int c = w; c < BN; c += 4) {
        const int gn = n0 + c;
        if (gn >= N) continue;
        float* col = C + (size_t)gn * M + gm0;
        const int lead = static_cast<int>((16 - (reinterpret_cast<size_t>(col) & 15)) & 15) / 4;
        const int lo = max(lead + 4 * (lane - 1), 0), hi = min(lead + 4 * lane, rows);
        if (lo >= hi) continue;
        float v[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) v[j] = lo + j < hi ? alpha * stage[staged(c, lo + j)] : 0.0f;
        float* p = col + lo;
        if (hi - lo == 4 && lane > 0) {  // 16-byte aligned
            float4* p4 = reinterpret_cast<float4*>(p);
            if (add) {
                atomicAdd(p4, make_float4(v[0], v[1], v[2], v[3]));
            } else {
                float4 r = make_float4(v[0], v[1], v[2], v[3]);
                if (beta != 0.0f) {
                    const float4 old = *p4;
                    r.x += beta * old.x;
                    r.y += beta * old.y;
                    r.z += beta * old.z;
                    r.w += beta * old.w;
                }
                *p4 = r;
            }
        } else {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                if (j >= hi - lo) break;
                if (add) atomicAdd(p + j, v[j]);
                else p[j] = beta == 0.0f ? v[j] : v[j] + beta * p[j];
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm(int M, int N, int K, float alpha, const float* __restrict__ A, const float* __restrict__ B, float beta,
     float* __restrict__ C, const __grid_constant__ OperandMaps a_maps, const __grid_constant__ OperandMaps b_maps,
     int paths, int* __restrict__ split_sync) {
    extern __shared__ unsigned char smem_raw[];
    __shared__ int ticket;
    // Aligned by pointer arithmetic on the shared array: an integer cast would lose the address space
    // and turn every access into a generic one.
    const Ring ring{smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023)};
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const int wg = threadIdx.x / 128, wt = threadIdx.x % 128;

    if (threadIdx.x == 0) ring_init(ring, paths, a_maps.m, b_maps.m);
    __syncthreads();

    if (wg == 0) {
        regs_dealloc<PRODUCER_REGS>();
        const KRange kr(K);
        produce(ring, kr, wt, paths, a_maps.m, b_maps.m, A, B, M, N, K, m0, n0);
        return;
    }

    regs_alloc<CONSUMER_REGS>();
    const KRange kr(K);  // per role: computed before the split, it was spilled
    const int gm0 = m0 + (wg - 1) * 64;
    float acc[NACC];
    consume(acc, ring, kr, wg, wt, paths, gm0 >= M, BN == 128 && N - n0 <= 64);

    // Both warpgroups are done with the ring (every copy landed, every wgmma waited for): it stages C.
    consumers_sync();
    bool add = false;
    int* sync = split_sync + 3 * (blockIdx.y * gridDim.x + blockIdx.x);  // ticket, flag, done
    if (gridDim.z > 1) {
        if (threadIdx.x == 128) {
            ticket = atomicAdd(sync, 1);
            if (ticket != 0)
                while (load_acquire(sync + 1) == 0) {
                }
        }
        consumers_sync();
        add = ticket != 0;
    }
    float* stage = reinterpret_cast<float*>(ring.base) + (wg - 1) * 64 * BN;
    write_c(stage, acc, wg, wt, C, M, N, gm0, min(64, M - gm0), n0, alpha, beta, add);
    if (gridDim.z > 1) {
        __threadfence();  // this slice's C writes before the flag (first slice) and the count
        consumers_sync();
        if (threadIdx.x == 128) {
            if (!add) atomicExch(sync + 1, 1);
            if (atomicAdd(sync + 2, 1) == (int)gridDim.z - 1) {  // the tile's last slice: zero for the next launch
                sync[0] = 0;
                sync[1] = 0;
                sync[2] = 0;
            }
        }
    }
}

static_assert(CONSUMERS * 64 * BN * 4 <= STAGES * (A_TILE_BYTES + B_COPIES * B_TILE_BYTES),
              "the epilogue stages C in the ring");

// The fallback for a B whose leading dimension breaks the tensor maps' 16-byte stride rule: the host
// has it copied, inside the timed launch, to one whose leading dimension `ld` is rounded up to a
// multiple of 4, and maps that. The pad rows are never read (the map's size excludes them).
extern "C" __global__ void pad_leading_dim(const float* __restrict__ src, float* __restrict__ dst, int rows, int cols,
                                           int ld) {
    const long long total = (long long)rows * cols;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
        const long long c = i / rows;
        dst[c * ld + (i - c * rows)] = src[i];
    }
}
