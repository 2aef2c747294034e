// Conv step 10: the backward pass (data and filter gradients) as implicit GEMMs on step 9's mainloop,
// no workspace.
//
// Idea:   step 6 runs the backward as two GEMMs over the unrolled input U and its gradient dU (two
//         workspaces of C*R*R x N*Ho*Wo), then col2im. Both products gather instead, as conv step 9's
//         forward does (implicit_wgmma.cuh), in the producer warpgroup:
//           data    dX (N*H*W x C) = A (N*H*W x K*R*R) . B (K*R*R x C): A(x pixel (n,h,w), (k,r,s)) is
//                   dY[n, k, (h+pad-r)/stride, (w+pad-s)/stride] where both divide (else 0), the
//                   forward's transposed convolution; B(k,r,s ; c) = Wt[k, c, r, s], the filters read
//                   transposed (gathered: a K-major tile of them is not a box of Wt). The epilogue
//                   writes dX in NCHW directly.
//           filter  dW (K x C*R*R) = dY (K x N*Ho*Wo) . U^T: A is dY itself (row k, column (n, pixel)),
//                   B(n,pixel ; c,r,s) the forward's patch gather turned on its side. The reduction is
//                   N*Ho*Wo long and the output only K x C*R*R (a few tiles), so it is split over
//                   gridDim.z; each slice adds its share into dW (zeroed first by `clear`) with atomics.
//         A stride > 1 costs the data gradient stride^2 times its work (the taps that do not divide
//         are gathered as zeros and multiplied).
// Source: CUTLASS's conv2d dgrad and wgrad (analytic iterators); conv step 9; split-K as in step 6.
// Params: BM, BN, BK, STAGES, PRECISION as step 9's; defaults BM=128 BN=64 STAGES=4 PRECISION=3
//         (nnbench/registry.py). The filter gradient's split count comes from the host.
// Launch: THREADS = 128 * (BM/64 + 1); data: grid (ceil(N*H*W / BM), ceil(C / BN));
//         filter: grid (ceil(K / BM), ceil(C*R*R / BN), slices); sm_90a only.
#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 64
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

#include "conv/implicit_wgmma.cuh"

struct DataGather {
    PatchRows<true> grads;
    const float* Wt;
    Taps taps;
    int C, Kk, R, n0, pt;

    __device__ __forceinline__ void load(const Ring& ring, int i, int kb) {
        const int s = i % STAGES;
        load_filters(ring.b_big(s), Wt, C, Kk, taps, R, R * R, C * R * R, n0, kb * BK, pt);
        grads.load(ring.a(s), kb * BK);
        mbar_arrive_cp_async(ring.full(s));
    }
};

// All of K in one slice (gridDim.z holds the data gradient's phases, not slices of K).
__device__ __forceinline__ KRange whole(int K) {
    KRange kr(K);
    kr.first = 0;
    kr.count = (K + BK - 1) / BK;
    return kr;
}

// Phase blockIdx.z = (ph, pw) of the data gradient: the input pixels (ph + stride*y, pw + stride*x)
// and the filter taps (r0 + stride*i, s0 + stride*j) that reach them, r0 = (ph + pad) % stride, for
// which (h + pad - r) / stride = y + (ph + pad - r0) / stride - i exactly: a stride-1 gather of dY.
extern "C" __global__ void __launch_bounds__(THREADS, 1)
conv_data_grad(const ConvDims d, const float* __restrict__ dY, const float* __restrict__ Wt, float* __restrict__ dX) {
    extern __shared__ unsigned char smem_raw[];
    const Ring ring{smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023)};
    const int st = d.stride, ph = blockIdx.z / st, pw = blockIdx.z % st;
    const int r0 = (ph + d.pad) % st, s0 = (pw + d.pad) % st;
    const Taps taps{r0 < d.R ? (d.R - r0 + st - 1) / st : 0, s0 < d.R ? (d.R - s0 + st - 1) / st : 0, st, r0, s0};
    const PixelGrid grid{(d.H - ph + st - 1) / st, (d.W - pw + st - 1) / st, d.H, d.W, st, ph, pw};
    const int M = d.N * grid.gh * grid.gw, Kk = d.K * taps.count();
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    if (m0 >= M) return;  // this phase has fewer pixels than the grid's largest
    const int wg = threadIdx.x / 128, wt = threadIdx.x % 128;

    if (threadIdx.x == 0) ring_init(ring, 0, nullptr, nullptr);
    __syncthreads();

    if (wg == 0) {
        regs_dealloc<GATHER_REGS>();
        const KRange kr = whole(Kk);
        DataGather g{PatchRows<true>(dY, M, Kk, d.K, d.Ho, d.Wo, grid.gh, grid.gw, taps.rows, taps.cols, 1,
                                     (ph + d.pad - r0) / st, (pw + d.pad - s0) / st, m0, wt),
                     Wt, taps, d.C, Kk, d.R, n0, wt};
        produce_gathered(ring, kr, wt, g);
        return;
    }

    regs_alloc<MATH_REGS>();
    const KRange kr = whole(Kk);
    float acc[NACC];
    consume(acc, ring, kr, wg, wt);  // no taps reach this phase (Kk = 0): zeros
    store_nchw(acc, dX, M, grid, d.C, m0, n0, wg, wt);
}

// The filter gradient's copies of one k-block (k = (n, output pixel)). dY rows by gather: lanes are
// 8 consecutive pixels x 4 output maps, so a warp reads whole 32-byte sectors and its shared-memory
// writes conflict at most 2-way; lane L decodes pixel k0 + L once and the elements take it by
// shuffle. The input patches: one k (pixel) per thread, consecutive threads consecutive pixels; the
// taps (c, r, s) of a warp's columns are fixed for the whole block, so lane L holds those of column
// j = L from the start and each element takes them by shuffle (as the forward's PatchRows does).
struct FilterGather {
    const float *dY, *X;
    int K, C, H, W, Wo, hw, R, stride, pad, Kk, m0, pt;
    int tap_off, tap_rs;  // this lane's column's taps: c*H*W + r*W + s, and (r << 15 | s) or -1 past C*R*R

    __device__ FilterGather(const float* dY_, const float* X_, const ConvDims& d, int Kk_, int m0_, int n0, int pt_)
        : dY(dY_), X(X_), K(d.K), C(d.C), H(d.H), W(d.W), Wo(d.Wo), hw(d.Ho * d.Wo), R(d.R), stride(d.stride), pad(d.pad),
          Kk(Kk_), m0(m0_), pt(pt_) {
        const int RR = d.R * d.R, crr = n0 + pt / 32 + (128 / BK) * (pt % 32);
        const int c = crr / RR, rs = crr - c * RR, r = rs / d.R, s = rs - r * d.R;
        tap_off = c * d.H * d.W + r * d.W + s;
        tap_rs = crr < d.C * RR ? (r << 15) | s : -1;
    }

    __device__ __forceinline__ void load_grads(float* as, int k0) const {
        const int kl = k0 + pt % 32, nl = kl / hw;
        const int lane_base = kl < Kk ? nl * K * hw + (kl - nl * hw) : -1;  // dY offset of (n, k = 0, pixel)
#pragma unroll
        for (int jk = 0; jk < BK / 8; ++jk) {
            const int kk = pt % 8 + 8 * jk;
            const int base = __shfl_sync(0xffffffffu, lane_base, kk);
#pragma unroll 4
            for (int jm = 0; jm < BM / 16; ++jm) {
                const int m = pt / 8 + 16 * jm, gm = m0 + m;
                const bool ok = base >= 0 && gm < K;
                cp_async_4(as + kk * A_PITCH + m, ok ? dY + base + (size_t)gm * hw : dY, ok);
            }
        }
    }

    __device__ __forceinline__ void load_patches(float* bs, int k0) const {
        const int kk = pt % BK, kg = k0 + kk;
        const bool valid = kg < Kk;
        const int n = valid ? kg / hw : 0, pix = kg - n * hw;
        const int h0 = pix / Wo * stride - pad, w0 = pix % Wo * stride - pad;
        const float* img = X + (size_t)n * C * H * W + (h0 * W + w0);
#pragma unroll 4
        for (int j = 0; j < B_PER_THREAD; ++j) {
            const int col = pt / 32 + j * (128 / BK);
            const int off = __shfl_sync(0xffffffffu, tap_off, j), packed = __shfl_sync(0xffffffffu, tap_rs, j);
            const int tr = packed >> 15, ts = packed & 0x7fff;
            bool ok = valid && packed >= 0 && (unsigned)(h0 + tr) < (unsigned)H && (unsigned)(w0 + ts) < (unsigned)W;
#ifdef MUTATE_DROP_TAP  // test-only (tests/test_gpu_conv.py): the last filter tap's gradient is never gathered
            ok = ok && !(packed == (((R - 1) << 15) | (R - 1)));
#endif
            cp_async_4(swizzled(bs, col, kk), ok ? img + off : X, ok);
        }
    }

    __device__ __forceinline__ void load(const Ring& ring, int i, int kb) {
        const int s = i % STAGES;
        load_grads(ring.a(s), kb * BK);
        load_patches(ring.b_big(s), kb * BK);
        mbar_arrive_cp_async(ring.full(s));
    }
};

extern "C" __global__ void __launch_bounds__(THREADS, 1)
conv_filter_grad(const ConvDims d, const float* __restrict__ X, const float* __restrict__ dY, float* __restrict__ dW) {
    extern __shared__ unsigned char smem_raw[];
    const Ring ring{smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023)};
    const int hw = d.Ho * d.Wo, RR = d.R * d.R, CRR = d.C * RR, Kk = d.N * hw;
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const int wg = threadIdx.x / 128, wt = threadIdx.x % 128;

    if (threadIdx.x == 0) ring_init(ring, 0, nullptr, nullptr);
    __syncthreads();

    if (wg == 0) {
        regs_dealloc<GATHER_REGS>();
        const KRange kr(Kk);
        FilterGather g(dY, X, d, Kk, m0, n0, wt);
        produce_gathered(ring, kr, wt, g);
        return;
    }

    regs_alloc<MATH_REGS>();
    const KRange kr(Kk);
    float acc[NACC];
    consume(acc, ring, kr, wg, wt);
    if (kr.count == 0) return;
    // Row gm is output map gm, column n the tap n0 + n: dW[gm, n0 + n] in (K, C*R*R) order.
    const int gm = m0 + consumer_row(wg, wt);
    for_each_pair(acc, wt, [&](int n, float v0, float v1) {
        const int c = n0 + n;
        if (c >= CRR || gm >= d.K) return;
        atomicAdd(dW + (size_t)gm * CRR + c, v0);
        if (gm + 1 < d.K) atomicAdd(dW + (size_t)(gm + 1) * CRR + c, v1);
    });
}

// dW = 0 before the filter gradient's slices add into it.
extern "C" __global__ void clear(float* __restrict__ out, int count) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) out[i] = 0.0f;
}
