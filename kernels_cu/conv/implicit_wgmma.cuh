// Implicit GEMM on step 9's mainloop (kernels_cu/common/wgmma_mainloop.cuh), shared by conv steps 9
// (forward) and 10 (backward): the producer warpgroups gather the GEMM's operand tiles straight from
// the NCHW tensors with 4-byte cp.async (zero-filled outside the image, the tensor or the GEMM), into
// exactly the shared-memory layouts the consumers expect (A M-major with padded rows, B K-major in the
// copy engine's 128-byte swizzle), so nothing is unrolled in global memory. The consumers, the
// 3xTF32 split and the ring's barriers are step 9's (with PRODUCER_WGS producer warpgroups).
//
// The includer defines BM, BN, BK, STAGES, PRODUCER_WGS and PRECISION first (the mainloop's).
#pragma once
#include "common/wgmma_mainloop.cuh"
#include "conv/conv_common.cuh"

// Registers after setmaxnreg: the producer's (GATHER_REGS) and the consumers', which get the rest
// of what the block was launched with (THREADS x the 240, 168 or 128 registers ptxas gives it under
// __launch_bounds__(THREADS, 1)). Asking for more than that pool hangs the consumers'
// setmaxnreg.inc for good (seen with 64 + 2 x 224 > 384 x 168). The gather keeps more elements in
// flight with more registers than step 9's copy-issuing producer needs (40): 88 measured 8-10%
// faster forward and 15-20% faster backward on the resnet layers (lab/journal/conv.md). With two
// producer warpgroups at BM = 128: 2 x 128 x 88 + 2 x 128 x 168 = 512 x 128 (the consumers use 164).
#ifndef GATHER_REGS
#define GATHER_REGS 88
#endif
#define LAUNCH_REGS (THREADS == 256 ? 240 : THREADS == 384 ? 168 : 128)  // ptxas's cap under __launch_bounds__(THREADS, 1)
#define REG_POOL (THREADS * LAUNCH_REGS)
#define MATH_REGS_FREE ((REG_POOL - PRODUCER_THREADS * GATHER_REGS) / (128 * CONSUMERS) / 8 * 8)
#define MATH_REGS (MATH_REGS_FREE < 240 ? MATH_REGS_FREE : 240)
static_assert(GATHER_REGS <= LAUNCH_REGS && MATH_REGS >= LAUNCH_REGS, "setmaxnreg: the producers give, the consumers take");

extern __shared__ unsigned char smem_raw[];  // the ring, aligned up to 1024 bytes by each kernel

#define A_PER_THREAD (BK * BM / PRODUCER_THREADS)  // A elements a producer thread gathers per k-block
#define B_PER_THREAD (BK * BN / PRODUCER_THREADS)

// Where the copy engine's 128-byte swizzle puts B(k, n) of a K-major tile: 16-byte chunk k/4 of
// row n moves to k/4 ^ n%8 (wgmma_mainloop.cuh's cp.async fallback writes the same layout).
__device__ __forceinline__ float* swizzled(float* bs, int n, int k) {
    return bs + n * BK + (((k >> 2) ^ (n & 7)) << 2) + (k & 3);
}

// Step 9's producer (produce_stream) with the copies left to `g`: g.load(ring, i, kb) issues k-block kb
// into slot i % STAGES and arrives on its `full` barrier. The k-blocks are loaded in order, one after
// the other, so a gather may keep running counters instead of dividing for every element.
template <class Gather>
__device__ __forceinline__ void produce_gathered(const Ring& ring, const KRange& kr, int pt, Gather& g) {
    produce_stream(ring, kr.count, pt, [&](int i) { g.load(ring, i, kr.first + i); });
}

// cp.async of the float at + off (zero-filled unless ok), its address one mad.wide (ptxas otherwise
// rebuilt it from the 64-bit image offset in four instructions).
__device__ __forceinline__ void gather_4(float* dst, const float* at, int off, bool ok) {
    asm volatile("{\n\t.reg .u64 src;\n\tmad.wide.s32 src, %1, 4, %2;\n\tcp.async.ca.shared.global [%0], [src], 4, %3;\n\t}"
                 ::"r"(smem_addr(dst)), "r"(off), "l"(at), "r"(ok ? 4 : 0) : "memory");
}

// The taps of a product: k = (q, t) with q a channel and t < taps = rows * cols a filter tap,
// tap t = (i, j) = (t / cols, t % cols) at filter position (r0 + step*i, s0 + step*j). The forward
// and a stride-1 data gradient use every tap (step 1); a strided data gradient is split into
// stride^2 phases of output pixels (h % stride, w % stride), each using only the taps that reach it.
struct Taps {
    int rows, cols, step, r0, s0;
    __device__ int count() const { return rows * cols; }
    __device__ int filter_offset(int t, int R) const {  // (r, s) of tap t as r * R + s
        const int i = t / cols;
        return (r0 + step * i) * R + s0 + step * (t - i * cols);
    }
};

// A(m, k) of a convolution-shaped product: m = (n, oh, ow) a pixel of the GEMM's output grid
// (Ho x Wo per image), k = (ci, i, j) a channel and tap; the value is the gathered tensor's
// (Ci, Hi, Wi) element at
//   forward (DGRAD false): (ci, oh*stride + oh_shift + i, ow*stride + ow_shift + j), shift = -pad
//   data gradient (true):  (ci, oh + oh_shift - i, ow + ow_shift - j)
// and 0 outside. A producer thread owns one tile row m (BM = 128) or one of two k phases (BM = 64),
// so its pixel is decoded once. The k of a warp's elements are the same for every lane, so per
// k-block lane L decodes k0 + L into (ci, i, j) once (two divisions) and each element takes its
// tap from the lane that owns it with two shuffles: about ten instructions an element, with no
// dependence between elements. (A running (ci, r, s) counter was about thirty, each waiting on the
// last: the producer's single warp per scheduler stalled on its own latency, ~3 us per k-block.)
template <bool DGRAD>
struct PatchRows {
    const float* img;  // this thread's image in the gathered tensor
    int oh_base, ow_base, pix_off, Hi, Wi, HWi, rows, cols, taps, Kk;
    int m, kk0;
    unsigned outside;  // load_masked's: bit i (< 15) clear where the taps' row i lies in the image, 16 + j column j
    bool live;
    // load_masked's running (channel, tap) of this lane's k row, advanced BK a k-block (the k-blocks come in
    // order), and 65536 / taps, 65536 / cols rounded up: n / taps = (n inv_taps) >> 16 exactly for the
    // n < taps + BK <= 257 it divides (the error (inv d - 65536) n < d n < 65536 at d <= 225).
    int lane_c = -1, lane_t = 0;
    unsigned inv_taps, inv_cols;

    __device__ PatchRows(const float* src, int M, int Kk_, int Ci, int Hi_, int Wi_, int Ho, int Wo, int rows_,
                         int cols_, int stride, int oh_shift, int ow_shift, int m0, int pt)
        : Hi(Hi_), Wi(Wi_), HWi(Hi_ * Wi_), rows(rows_), cols(cols_), taps(rows_ * cols_), Kk(Kk_) {
        m = pt % BM;
        kk0 = pt / BM;
        const int gm = m0 + m;
        live = gm < M;
        const int g = live ? gm : 0, hw = Ho * Wo;
        const int n = hw ? g / hw : 0, pix = g - n * hw, oh = Wo ? pix / Wo : 0, ow = pix - oh * Wo;
        img = src + (size_t)n * Ci * HWi;
        oh_base = oh * stride + oh_shift;
        ow_base = ow * stride + ow_shift;
        pix_off = oh_base * Wi + ow_base;
        unsigned inside = 0;
        for (int i = 0; i < rows && i < 15; ++i)
            inside |= (unsigned)((unsigned)(DGRAD ? oh_base - i : oh_base + i) < (unsigned)Hi) << i;
        for (int j = 0; j < cols && j < 15; ++j)
            inside |= (unsigned)((unsigned)(DGRAD ? ow_base - j : ow_base + j) < (unsigned)Wi) << (16 + j);
        outside = live ? ~inside : ~0u;
        inv_taps = taps ? (65535u + taps) / taps : 0;
        inv_cols = cols ? (65535u + cols) / cols : 0;
    }

    __device__ __forceinline__ void load(float* as, int k0) {
        if (rows < 16 && cols < 16) {
            load_masked(as, k0);
            return;
        }
        // Wider taps: this lane's k: its element offset from the pixel's, and (i, j) packed (-1: past the GEMM's K).
        const int k = k0 + threadIdx.x % 32, c = k / taps, t = k - c * taps, i = t / cols, j = t - i * cols;
        const int lane_off = DGRAD ? c * HWi - i * Wi - j : c * HWi + i * Wi + j;
        const int lane_ij = k < Kk ? (i << 15) | j : -1;
#pragma unroll
        for (int e = 0; e < A_PER_THREAD; ++e) {
            const int kk = kk0 + e * (PRODUCER_THREADS / BM);
            const int off = __shfl_sync(0xffffffffu, lane_off, kk), packed = __shfl_sync(0xffffffffu, lane_ij, kk);
            const int ti = packed >> 15, tj = packed & 0x7fff;
            const int h = DGRAD ? oh_base - ti : oh_base + ti, w = DGRAD ? ow_base - tj : ow_base + tj;
            bool ok = live && packed >= 0 && (unsigned)h < (unsigned)Hi && (unsigned)w < (unsigned)Wi;
            cp_async_4(as + kk * A_PITCH + m, ok ? img + (pix_off + off) : img, ok);
        }
    }

    // The same gather where the taps are at most 15 x 15: lane L's k row is (1 << i) | (1 << 16 + j), its
    // tap's row and column bits (bit 15 past the GEMM's K, always outside), so an element's test is one
    // AND against this thread's `outside` (a LOP3 into a predicate), not two unpacks, two adds and two bounds. The
    // lane's (channel, tap) advances by multiplications (two divisions a k-block were ~40 instructions).
    __device__ __forceinline__ void load_masked(float* as, int k0) {
        if (lane_c < 0) {
            const int k = k0 + threadIdx.x % 32;
            lane_c = k / taps;
            lane_t = k - lane_c * taps;
        } else {
            lane_t += BK;
            const int carry = (lane_t * inv_taps) >> 16;
            lane_c += carry;
            lane_t -= carry * taps;
        }
        const int i = (lane_t * inv_cols) >> 16, j = lane_t - i * cols, k = lane_c * taps + lane_t;
        const int lane_off = DGRAD ? lane_c * HWi - i * Wi - j : lane_c * HWi + i * Wi + j;
        const unsigned lane_bits = k < Kk ? (1u << i) | (1u << (16 + j)) : 1u << 15;
        const float* at = img + pix_off;
#pragma unroll
        for (int e = 0; e < A_PER_THREAD; ++e) {
            const int kk = kk0 + e * (PRODUCER_THREADS / BM);
            const int off = __shfl_sync(0xffffffffu, lane_off, kk);
            const unsigned bits = __shfl_sync(0xffffffffu, lane_bits, kk);
            bool ok = (outside & bits) == 0;
            gather_4(as + kk * A_PITCH + m, at, ok ? off : -pix_off, ok);
        }
    }
};

// B(k, n) of a filter bank: k = (q, t) with t a tap of `taps`, the value W[n * ldn + q * ldk + the
// tap's r * R + s]. The forward reads the filters as they are (n the output map, q the input
// channel: ldn = C*R*R, ldk = R*R); the data gradient reads them transposed (n the input channel,
// q the output map: ldn = R*R, ldk = C*R*R). A producer thread owns one k of the tile (consecutive
// threads, consecutive k), so it divides once per k-block.
__device__ __forceinline__ void load_filters(float* bs, const float* __restrict__ Wt, int Nn, int Kk, const Taps& taps,
                                             int R, int ldn, int ldk, int n0, int k0, int pt) {
    const int kk = pt % BK, k = k0 + kk, q = k / taps.count();
    const float* base = Wt + q * ldk + taps.filter_offset(k - q * taps.count(), R);
#pragma unroll 4
    for (int j = 0; j < B_PER_THREAD; ++j) {
        const int n = pt / BK + j * (PRODUCER_THREADS / BK);
        const bool ok = n0 + n < Nn && k < Kk;
        cp_async_4(swizzled(bs, n, kk), ok ? base + (size_t)(n0 + n) * ldn : Wt, ok);
    }
}

// The B tile of a k-block: the filters by the copy engine (a 2-D map over a K-major copy of them: the
// forward's own filters, or the data gradient's transposed ones), else gathered by load_filters.
struct FilterTiles {
    const float* Wt;
    const CUtensorMap* map;
    Taps taps;
    int paths, Nn, Kk, R, ldn, ldk;

    __device__ __forceinline__ void load(const Ring& ring, int s, int k0, int n0, int pt) const {
        if (paths & PATH_TMA_B) {
            if (pt == 0) {
                mbar_expect_tx(ring.full(s), B_TILE_BYTES);
                tma_load_2d(ring.b_big(s), map, k0, n0, ring.full(s));  // box BK x BN, 128-byte swizzle
            }
        } else {
            load_filters(ring.b_big(s), Wt, Nn, Kk, taps, R, ldn, ldk, n0, k0, pt);
        }
    }
};

// One k-block of the forward (DGRAD false: input patches x filters) or the data gradient (true: dY's
// patches x the filters transposed): both operands issued into slot i % STAGES, then this thread's
// arrival on `full` once its copies land.
template <bool DGRAD>
struct ConvGather {
    PatchRows<DGRAD> rows;
    FilterTiles filters;
    int n0, pt;

    __device__ __forceinline__ void load(const Ring& ring, int i, int kb) {
        const int s = i % STAGES, k0 = kb * BK;
        filters.load(ring, s, k0, n0, pt);
        rows.load(ring.a(s), k0);
        mbar_arrive_cp_async(ring.full(s));
    }
};

// The consumer thread's C fragment into an NCHW tensor (maps x H x W per image) whose GEMM rows are
// pixels of a grid (gh x gw per image) placed at (h0 + step*y, w0 + step*x), and whose columns are
// its `maps` channels: rows gm, gm + 1 are two pixels, column n is channel n0 + n, H*W floats apart.
// Where the grid is the whole image (step 1) and H*W is even, both pixels lie in one image, adjacent:
// one 8-byte store.
struct PixelGrid {
    int gh, gw, H, W, step, h0, w0;
    __device__ size_t offset(int gm, int maps) const {
        const int g = gh * gw, n = gm / g, pix = gm - n * g, y = pix / gw, x = pix - y * gw;
        return (size_t)n * maps * H * W + (size_t)(h0 + step * y) * W + w0 + step * x;
    }
};

__device__ __forceinline__ void store_nchw(const float (&acc)[NACC], float* __restrict__ out, int M,
                                           const PixelGrid& grid, int maps, int m0, int n0, int wg, int wt,
                                           bool add = true) {
    const int gm = m0 + consumer_row(wg, wt);
    if (gm >= M) return;
    const bool second = gm + 1 < M;
    const size_t y0 = grid.offset(gm, maps), y1 = second ? grid.offset(gm + 1, maps) : 0;
    const size_t hw = (size_t)grid.H * grid.W;
    const bool pair = grid.step == 1 && (hw & 1) == 0, split = add && gridDim.z > 1 && grid.step == 1;
    for_each_pair(acc, wt, [&](int n, float v0, float v1) {
        const int c = n0 + n;
        if (c >= maps) return;
        const size_t off = (size_t)c * hw;
        if (split) {  // split-K (the forward's gridDim.z): the host zeroed `out`; each slice adds its share
            atomicAdd(out + y0 + off, v0);
            if (second) atomicAdd(out + y1 + off, v1);
        } else if (pair) {
            *reinterpret_cast<float2*>(out + y0 + off) = make_float2(v0, v1);
        } else {
            out[y0 + off] = v0;
            if (second) out[y1 + off] = v1;
        }
    });
}

// -- split-K in pairs: the two K slices of one tile as a cluster of two blocks (gridDim.z = 2) -------
// Rank 1 leaves its partial tile in its own shared memory (over the ring, which no wgmma reads any more)
// and says so on rank 0's `exch` barrier; rank 0 adds it, read through distributed shared memory, says
// so on rank 1's, and stores the tile with plain stores. No zeroing pass and no atomics (the forward's
// zeroing of Y alone took 5.7 us of its 0.115 ms at N32 C128 28x28). Both barriers sit after the ring's.
__device__ __forceinline__ unsigned long long* exch_bar(const Ring& ring) { return ring.bars() + 3 * STAGES; }

__device__ __forceinline__ void mbar_arrive_remote_release(unsigned long long* bar, unsigned cta) {
    asm volatile(
        "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
        "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\n}\n" ::"r"(smem_addr(bar)), "r"(cta)
        : "memory");
}
__device__ __forceinline__ void mbar_wait_cluster(unsigned long long* bar, unsigned parity) {
    asm volatile(
        "{\n.reg .pred done;\n"
        "WAIT_%=:\n"
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT_%=;\n}\n" ::"r"(smem_addr(bar)), "r"(parity) : "memory");
}
__device__ __forceinline__ float4 ld_cluster_v4(const float4* p, unsigned cta) {
    float4 v;
    asm volatile(
        "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %4, %5;\n"
        "ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [remote];\n}\n"
        : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(smem_addr(p)), "r"(cta) : "memory");
    return v;
}

// Thread 0, with ring_init: rank 0 waits for the 256 consumer threads of rank 1, and rank 1 for rank 0's.
__device__ __forceinline__ void exch_init(const Ring& ring) {
    mbar_init(exch_bar(ring), 128 * CONSUMERS);
    mbar_init_fence();
}

// A consumer thread of either rank, after consume(): true on rank 0, whose acc then holds the whole sum.
__device__ __forceinline__ bool pair_reduce(float (&acc)[NACC], const Ring& ring) {
    asm volatile("bar.sync 1, %0;" ::"n"(128 * CONSUMERS) : "memory");  // every consumer's last wgmma is done
    const int ct = threadIdx.x - PRODUCER_THREADS;
    float4* tile = reinterpret_cast<float4*>(ring.base) + ct;  // [NACC / 4][consumer threads] float4s
    const unsigned rank = cluster_ctarank();
    if (rank == 1) {
#pragma unroll
        for (int r = 0; r < NACC / 4; ++r)
            tile[r * 128 * CONSUMERS] = make_float4(acc[4 * r], acc[4 * r + 1], acc[4 * r + 2], acc[4 * r + 3]);
        mbar_arrive_remote_release(exch_bar(ring), 0);
        mbar_wait_cluster(exch_bar(ring), 0);  // rank 0 has read it: this block's shared memory may go
        return false;
    }
    mbar_wait_cluster(exch_bar(ring), 0);
#pragma unroll
    for (int r = 0; r < NACC / 4; ++r) {
        const float4 v = ld_cluster_v4(tile + r * 128 * CONSUMERS, 1);
        acc[4 * r] += v.x;
        acc[4 * r + 1] += v.y;
        acc[4 * r + 2] += v.z;
        acc[4 * r + 3] += v.w;
    }
    mbar_arrive_remote_release(exch_bar(ring), 1);
    return true;
}

// A split-K pass's first step: out = 0, before the slices add into it.
extern "C" __global__ void clear(float* __restrict__ out, int count) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) out[i] = 0.0f;
}
