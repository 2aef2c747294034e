// Implicit GEMM on step 9's mainloop (kernels_cu/common/wgmma_mainloop.cuh), shared by conv steps 9
// (forward) and 10 (backward): the producer warpgroup gathers the GEMM's operand tiles straight from
// the NCHW tensors with 4-byte cp.async (zero-filled outside the image, the tensor or the GEMM), into
// exactly the shared-memory layouts the consumers expect (A M-major with padded rows, B K-major in the
// copy engine's 128-byte swizzle), so nothing is unrolled in global memory. The consumers, the
// 3xTF32 split and the ring's barriers are step 9's, unchanged.
//
// The includer defines BM, BN, BK, STAGES and PRECISION first (the mainloop's).
#pragma once
#include "common/wgmma_mainloop.cuh"
#include "conv/conv_common.cuh"

// Registers after setmaxnreg: the gather needs more than step 9's producer (whose copies are a few
// bulk-copy instructions) to keep its elements independent; the consumers get the rest of the 64K.
#ifndef GATHER_REGS
#define GATHER_REGS PRODUCER_REGS
#endif
#define MATH_REGS_FREE ((65536 - 128 * GATHER_REGS) / (128 * CONSUMERS) / 8 * 8)
#define MATH_REGS (MATH_REGS_FREE < 240 ? MATH_REGS_FREE : 240)

#define A_PER_THREAD (BK * BM / 128)  // A elements a producer thread gathers per k-block
#define B_PER_THREAD (BK * BN / 128)

// Where the copy engine's 128-byte swizzle puts B(k, n) of a K-major tile: 16-byte chunk k/4 of
// row n moves to k/4 ^ n%8 (wgmma_mainloop.cuh's cp.async fallback writes the same layout).
__device__ __forceinline__ float* swizzled(float* bs, int n, int k) {
    return bs + n * BK + (((k >> 2) ^ (n & 7)) << 2) + (k & 3);
}

// Step 9's producer with the copies left to `g`: g.load(ring, i, kb) issues k-block kb into slot
// i % STAGES and arrives on its `full` barrier. The k-blocks are loaded in order, one after the
// other, so a gather may keep running counters instead of dividing for every element.
template <class Gather>
__device__ __forceinline__ void produce_gathered(const Ring& ring, const KRange& kr, int pt, Gather& g) {
    const int first = kr.count < STAGES ? kr.count : STAGES;
    for (int i = 0; i < first; ++i) g.load(ring, i, kr.first + i);
    for (int i = 0; i < kr.count; ++i) {
        const int s = i % STAGES;
        mbar_wait(ring.full(s), (i / STAGES) & 1);
        split_b_tile(ring, s, pt);
        fence_proxy_async();
        mbar_arrive(ring.ready(s));
        const int done = i - 1;
        if (done >= 0 && done + STAGES < kr.count) {
            mbar_wait(ring.empty(done % STAGES), (done / STAGES) & 1);
            g.load(ring, done + STAGES, kr.first + done + STAGES);
        }
    }
}

// A(m, k) of a convolution-shaped product: m = (n, oh, ow) a pixel of the GEMM's output grid
// (Ho x Wo per image), k = (ci, r, s) a channel and filter tap; the value is the gathered tensor's
// (Ci, Hi, Wi) element at
//   forward (DGRAD false): (ci, oh*stride - pad + r, ow*stride - pad + s)
//   data gradient (true):  (ci, (oh + pad - r)/stride, (ow + pad - s)/stride) where both divide,
// and 0 outside. A producer thread owns one tile row m (BM = 128) or one of two k phases (BM = 64),
// so its pixel is decoded once. The k of a warp's elements are the same for every lane, so per
// k-block lane L decodes k0 + L into (ci, r, s) once (two divisions) and each element takes its
// tap from the lane that owns it with two shuffles: about ten instructions an element, with no
// dependence between elements. (A running (ci, r, s) counter was about thirty, each waiting on the
// last: the producer's single warp per scheduler stalled on its own latency, ~3 us per k-block.)
template <bool DGRAD>
struct PatchRows {
    const float* img;  // this thread's image in the gathered tensor
    int oh_base, ow_base, pix_off, Hi, Wi, HWi, R, RR, stride, Kk;
    int m, kk0;
    bool live;

    __device__ PatchRows(const float* src, int M, int Kk_, int Ci, int Hi_, int Wi_, int Ho, int Wo, int R_,
                         int stride_, int pad, int m0, int pt)
        : Hi(Hi_), Wi(Wi_), HWi(Hi_ * Wi_), R(R_), RR(R_ * R_), stride(stride_), Kk(Kk_) {
        m = pt % BM;
        kk0 = pt / BM;
        const int gm = m0 + m;
        live = gm < M;
        const int g = live ? gm : 0, hw = Ho * Wo;
        const int n = g / hw, pix = g % hw, oh = pix / Wo, ow = pix % Wo;
        img = src + (size_t)n * Ci * HWi;
        oh_base = DGRAD ? oh + pad : oh * stride - pad;
        ow_base = DGRAD ? ow + pad : ow * stride - pad;
        pix_off = oh_base * Wi + ow_base;
    }

    __device__ __forceinline__ void load(float* as, int k0) const {
        // This lane's k: its element offset from the pixel's, and (r, s) packed (-1: past the GEMM's K).
        const int k = k0 + threadIdx.x % 32, c = k / RR, rs = k - c * RR, r = rs / R, s = rs - r * R;
        const bool strided = DGRAD && stride != 1;
        const int lane_off = strided ? c * HWi : DGRAD ? c * HWi - r * Wi - s : c * HWi + r * Wi + s;
        const int lane_rs = k < Kk ? (r << 15) | s : -1;
#pragma unroll
        for (int j = 0; j < A_PER_THREAD; ++j) {
            const int kk = kk0 + j * (128 / BM);
            const int off = __shfl_sync(0xffffffffu, lane_off, kk), packed = __shfl_sync(0xffffffffu, lane_rs, kk);
            const int tr = packed >> 15, ts = packed & 0x7fff;
            int h = DGRAD ? oh_base - tr : oh_base + tr, w = DGRAD ? ow_base - ts : ow_base + ts;
            bool ok = live && packed >= 0;
            const float* src = img + (pix_off + off);
            if (strided) {  // the data gradient of a strided layer: only the taps that divide
                ok = ok && h >= 0 && w >= 0 && h % stride == 0 && w % stride == 0;
                h /= stride;
                w /= stride;
                src = img + off + h * Wi + w;
            }
            ok = ok && (unsigned)h < (unsigned)Hi && (unsigned)w < (unsigned)Wi;
#ifdef MUTATE_DROP_TAP  // test-only (tests/test_gpu_conv.py): the last filter tap is never gathered
            ok = ok && !(tr == R - 1 && ts == R - 1);
#endif
            cp_async_4(as + kk * A_PITCH + m, ok ? src : img, ok);
        }
    }
};

// B(k, n) of a filter bank: k = (q, rs) with rs < RR, the value W[n * ldn + q * ldk + rs]. The
// forward reads the filters as they are (n the output map, q the input channel: ldn = C*RR,
// ldk = RR); the data gradient reads them transposed (n the input channel, q the output map:
// ldn = RR, ldk = C*RR). A producer thread owns one k of the tile (consecutive threads,
// consecutive k), so it divides once per k-block.
__device__ __forceinline__ void load_filters(float* bs, const float* __restrict__ Wt, int Nn, int Kk, int RR, int ldn,
                                             int ldk, int n0, int k0, int pt) {
    const int kk = pt % BK, k = k0 + kk;
    const float* base = Wt + (k / RR) * ldk + k % RR;
#pragma unroll 4
    for (int j = 0; j < B_PER_THREAD; ++j) {
        const int n = pt / BK + j * (128 / BK);
        const bool ok = n0 + n < Nn && k < Kk;
        cp_async_4(swizzled(bs, n, kk), ok ? base + (size_t)(n0 + n) * ldn : Wt, ok);
    }
}

// The consumer thread's C fragment into an NCHW tensor whose GEMM rows are pixels (M = N * hw) and
// columns its `maps` channels: rows gm, gm + 1 are two pixels and column n is channel n0 + n, hw
// floats apart. Where hw is even, both pixels lie in one image, adjacent: one 8-byte store.
__device__ __forceinline__ void store_nchw(const float (&acc)[NACC], float* __restrict__ out, int M, int hw, int maps,
                                           int m0, int n0, int wg, int wt) {
    const int gm = m0 + consumer_row(wg, wt);
    if (gm >= M) return;
    const bool second = gm + 1 < M;
    const size_t y0 = (size_t)(gm / hw) * maps * hw + gm % hw;
    const size_t y1 = second ? (size_t)((gm + 1) / hw) * maps * hw + (gm + 1) % hw : 0;
    const bool pair = (hw & 1) == 0;
    for_each_pair(acc, wt, [&](int n, float v0, float v1) {
        const int c = n0 + n;
        if (c >= maps) return;
        const size_t off = (size_t)c * hw;
        if (pair) {
            *reinterpret_cast<float2*>(out + y0 + off) = make_float2(v0, v1);
        } else {
            out[y0 + off] = v0;
            if (second) out[y1 + off] = v1;
        }
    });
}
