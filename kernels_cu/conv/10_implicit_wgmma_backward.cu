// Conv step 10: the backward pass (data and filter gradients) as implicit GEMMs on step 9's mainloop,
// no workspace.
//
// Idea:   step 6 runs the backward as two GEMMs over the unrolled input U and its gradient dU (two
//         workspaces of C*R*R x N*Ho*Wo), then col2im. Both products gather instead, as conv step 9's
//         forward does (implicit_wgmma.cuh), in the producer warpgroup:
//           data    dX (N*H*W x C) = A (N*H*W x K*R*R) . B (K*R*R x C): A(x pixel (n,h,w), (k,r,s)) is
//                   dY[n, k, (h+pad-r)/stride, (w+pad-s)/stride] where both divide (else 0), the
//                   forward's transposed convolution; B(k,r,s ; c) = Wt[k, c, r, s], the filters read
//                   transposed: a K-major tile of them is no box of Wt, so at stride 1 the host first
//                   writes them transposed into dW's buffer (`transpose_filters`; dW is computed after)
//                   and they come by bulk tensor copy, else they are gathered. The epilogue writes dX
//                   in NCHW directly.
//           filter  dW^T (C*R*R x K) = U (C*R*R x N*Ho*Wo) . dY^T: A(tap, pixel) the forward's patch
//                   gather turned on its side (a thread owns one tap), B(pixel, k) = dY as it lies in
//                   memory, K-major, by bulk tensor copy (a 3-D map; each image's pixels padded to
//                   whole k-blocks). The reduction is N*Ho*Wo long and the output only C*R*R x K (a
//                   few tiles), so it is split over gridDim.z; each slice adds its share into dW
//                   (zeroed first by `clear`) with atomics.
//         A strided layer's data gradient runs in stride^2 phases of input pixels (h % stride,
//         w % stride), gridDim.z, each a stride-1 gather over only the taps that reach it: gathering
//         every tap and dividing cost 2.37 ms at N32 C64 56x56 K128 s2, 3/4 of the products zeros.
//         At stride 1 gridDim.z splits K instead where the tiles leave a short last wave, as the
//         forward's does (196 tiles at N32 C128 28x28: 0.160 -> 0.143 ms in 2 slices), two slices
//         as cluster pairs (`conv_data_grad_pair`).
// Source: CUTLASS's conv2d dgrad and wgrad (analytic iterators); conv step 9; split-K as in step 6.
// Params: BM, BN, BK, STAGES, PRODUCER_WGS, PRECISION as step 9's; defaults BM=128 BN=64 STAGES=4
//         PRODUCER_WGS=2 PRECISION=3 (nnbench/registry.py). The filter gradient's split count comes
//         from the host.
// Launch: THREADS = 128 * (BM/64 + PRODUCER_WGS); data: grid (ceil(N*ceil(H/s)*ceil(W/s) / BM), ceil(C / BN), s^2, or at
//         stride 1 the forward's split of K, conv_data_slices in nnbench/workloads/conv/session.py);
//         filter: grid (ceil(C*R*R / BM), ceil(K / BN), slices); sm_90a only.
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
#ifndef PRODUCER_WGS
#define PRODUCER_WGS 2
#endif

#include "conv/implicit_wgmma.cuh"

// The data gradient's B at stride 1 by the copy engine: the host first writes the filters transposed,
// Wt2[c][k][r][s] = Wt[k][c][r][s], so a K-major row of B (one input channel c, k = (k, r, s)) is
// contiguous, into the filter gradient's output dW (the same K*C*R*R floats, not yet written: the
// filter gradient runs after the data gradient and zeroes it first). No memory beyond the pass's own.
extern "C" __global__ void transpose_filters(const ConvDims d, const float* __restrict__ Wt, float* __restrict__ Wt2) {
    const int RR = d.R * d.R, count = d.K * d.C * RR;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) {
        const int t = i % RR, kc = i / RR, c = kc % d.C, k = kc / d.C;  // i = (k, c, t) of Wt
        Wt2[((size_t)c * d.K + k) * RR + t] = Wt[i];
    }
}

// All of K in one slice (gridDim.z holds a strided data gradient's phases, not slices of K).
__device__ __forceinline__ KRange whole(int K) {
    KRange kr(K);
    kr.first = 0;
    kr.count = (K + BK - 1) / BK;
    return kr;
}

// Phase blockIdx.z = (ph, pw) of the data gradient: the input pixels (ph + stride*y, pw + stride*x)
// and the filter taps (r0 + stride*i, s0 + stride*j) that reach them, r0 = (ph + pad) % stride, for
// which (h + pad - r) / stride = y + (ph + pad - r0) / stride - i exactly: a stride-1 gather of dY.
// PAIR: at stride 1, K in two slices as cluster pairs reduced through shared memory (pair_reduce).
template <bool PAIR>
__device__ __forceinline__ void data_grad(const ConvDims& d, const float* __restrict__ dY, const float* __restrict__ Wt,
                                          float* __restrict__ dX, const CUtensorMap& wt2_map, int paths) {
    const Ring ring{smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023)};
    // gridDim.z: the stride^2 phases, or at stride 1 slices of K (split-K into a zeroed dX, as the forward's)
    const int st = d.stride, phase = st == 1 ? 0 : blockIdx.z, ph = phase / st, pw = phase % st;
    const int r0 = (ph + d.pad) % st, s0 = (pw + d.pad) % st;
    const Taps taps{r0 < d.R ? (d.R - r0 + st - 1) / st : 0, s0 < d.R ? (d.R - s0 + st - 1) / st : 0, st, r0, s0};
    const PixelGrid grid{(d.H - ph + st - 1) / st, (d.W - pw + st - 1) / st, d.H, d.W, st, ph, pw};
    const int M = d.N * grid.gh * grid.gw, Kk = d.K * taps.count();
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    if (!PAIR && m0 >= M) return;  // this phase has fewer pixels than the grid's largest (a pair is stride 1)
    const int wg = threadIdx.x / 128, wt = threadIdx.x % 128;

    if (st > 1) paths = 0;  // a phase's taps are not a contiguous run of a transposed row: gathered
    if (threadIdx.x == 0) {
        ring_init(ring, paths, &wt2_map, &wt2_map);
        if constexpr (PAIR) exch_init(ring);
    }
    if constexpr (PAIR) cluster_sync();
    else __syncthreads();

    if (wg < PRODUCER_WGS) {  // the producer warpgroups: thread pt of PRODUCER_THREADS
        const int pt = threadIdx.x;
        regs_dealloc<GATHER_REGS>();
        const KRange kr = st == 1 ? KRange(Kk) : whole(Kk);
        ConvGather<true> g{PatchRows<true>(dY, M, Kk, d.K, d.Ho, d.Wo, grid.gh, grid.gw, taps.rows, taps.cols, 1,
                                           (ph + d.pad - r0) / st, (pw + d.pad - s0) / st, m0, pt),
                           FilterTiles{Wt, &wt2_map, taps, paths, d.C, Kk, d.R, d.R * d.R, d.C * d.R * d.R}, n0, pt};
        produce_gathered(ring, kr, pt, g);
        return;
    }

    regs_alloc<MATH_REGS>();
    const KRange kr = st == 1 ? KRange(Kk) : whole(Kk);
    float acc[NACC];
    consume(acc, ring, kr, wg, wt);  // no taps reach this phase (Kk = 0): zeros
    if constexpr (PAIR) {
        if (!pair_reduce(acc, ring)) return;
    } else {
        if (st == 1 && kr.count == 0) return;  // an empty slice of a split K
    }
    store_nchw(acc, dX, M, grid, d.C, m0, n0, wg, wt, !PAIR);
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
conv_data_grad(const ConvDims d, const float* __restrict__ dY, const float* __restrict__ Wt, float* __restrict__ dX,
               const __grid_constant__ CUtensorMap wt2_map, int paths) {
    data_grad<false>(d, dY, Wt, dX, wt2_map, paths);
}

extern "C" __global__ void __launch_bounds__(THREADS, 1) __cluster_dims__(1, 1, 2)
conv_data_grad_pair(const ConvDims d, const float* __restrict__ dY, const float* __restrict__ Wt,
                    float* __restrict__ dX, const __grid_constant__ CUtensorMap wt2_map, int paths) {
    data_grad<true>(d, dY, Wt, dX, wt2_map, paths);
}


// A bulk tensor copy of one box of a 3-D tensor map at element coordinates (c0 innermost).
__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, int c0, int c1, int c2,
                                            unsigned long long* bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
        ::"r"(smem_addr(dst)), "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(c2),
        "r"(smem_addr(bar))
        : "memory");
}

// The filter gradient as dW^T (C*R*R x K) = U (C*R*R x N*Ho*Wo) . dY^T: the GEMM's k runs over the
// output pixels image by image, each image's Ho*Wo padded to whole k-blocks (`blocks_per_image`), so
// a k-block is BK consecutive pixels of one image. B(pixel, k) = dY[n, k, pixel] is then a K-major
// box of dY as it lies in memory and comes by bulk tensor copy (a 3-D map over (Ho*Wo, K, N); the
// pixels past Ho*Wo arrive as zeros), or by cp.async where Ho*Wo breaks the 16-byte stride rule.
// A(tap, pixel) = the input under that tap of that pixel: a producer thread owns one tap (tile row
// m, BM = 128) for the whole K loop, so its (c, r, s) is divided out once; per k-block lane L decodes
// pixel L once and each element takes it by shuffle (as the forward's PatchRows does).
struct FilterGather {
    const float *X, *dY;
    const CUtensorMap* dy_map;
    int paths, C, H, W, Wo, hw, K, R, stride, pad, blocks_per_image, n0, pt;
    int m, kk0, tap_off, tap_r, tap_s;
    bool live;

    __device__ FilterGather(const float* X_, const float* dY_, const CUtensorMap* map, int paths_, const ConvDims& d,
                            int bpi, int m0, int n0_, int pt_)
        : X(X_), dY(dY_), dy_map(map), paths(paths_), C(d.C), H(d.H), W(d.W), Wo(d.Wo), hw(d.Ho * d.Wo), K(d.K),
          R(d.R), stride(d.stride), pad(d.pad), blocks_per_image(bpi), n0(n0_), pt(pt_) {
        m = pt % BM;
        kk0 = pt / BM;
        const int RR = d.R * d.R, tap = m0 + m;
        live = tap < d.C * RR;
        const int c = live ? tap / RR : 0, rs = tap - c * RR;
        tap_r = rs / d.R;
        tap_s = rs - tap_r * d.R;
        tap_off = c * d.H * d.W + tap_r * d.W + tap_s;
    }

    __device__ __forceinline__ void load(const Ring& ring, int i, int kb) {
        const int s = i % STAGES, n = kb / blocks_per_image, pix0 = (kb - n * blocks_per_image) * BK;
        float* bs = ring.b_big(s);
        if (paths & PATH_TMA_B) {
            if (pt == 0) {
                mbar_expect_tx(ring.full(s), B_TILE_BYTES);
                tma_load_3d(bs, dy_map, pix0, n0, n, ring.full(s));  // box BK x BN x 1, 128-byte swizzle
            }
        } else {
            const int kk = pt % BK, pix = pix0 + kk;
            const float* base = dY + (size_t)n * K * hw + pix;
#pragma unroll 4
            for (int j = 0; j < B_PER_THREAD; ++j) {
                const int col = pt / BK + j * (PRODUCER_THREADS / BK);
                const bool ok = pix < hw && n0 + col < K;
                cp_async_4(swizzled(bs, col, kk), ok ? base + (size_t)(n0 + col) * hw : dY, ok);
            }
        }
        // This lane's pixel: where its window starts (h0, w0); past the image's pixels, a window whose
        // every tap lies above the image.
        const int pix = pix0 + threadIdx.x % 32, oh = pix / Wo;
        const int lane_h0 = pix < hw ? oh * stride - pad : -H - R, lane_w0 = (pix - oh * Wo) * stride - pad;
        const float* img = X + (size_t)n * C * H * W + tap_off;
        float* as = ring.a(s);
        if (R < 16) {  // the bounds test by one mask, as PatchRows::load_masked: bit i of the lane's window's
                       // rows inside the image, bit 16 + j of its columns, against this thread's tap's bits
            unsigned lane_inside = 0;
            for (int i = 0; i < R; ++i) {
                lane_inside |= (unsigned)((unsigned)(lane_h0 + i) < (unsigned)H) << i;
                lane_inside |= (unsigned)((unsigned)(lane_w0 + i) < (unsigned)W) << (16 + i);
            }
            const int lane_off = lane_h0 * W + lane_w0;
            const unsigned tap_bits = live ? (1u << tap_r) | (1u << (16 + tap_s)) : 1u << 15;
#pragma unroll
            for (int e = 0; e < A_PER_THREAD; ++e) {
                const int kk = kk0 + e * (PRODUCER_THREADS / BM);
                const int off = __shfl_sync(0xffffffffu, lane_off, kk);
                const unsigned in = __shfl_sync(0xffffffffu, lane_inside, kk);
                const bool ok = (in & tap_bits) == tap_bits;
                gather_4(as + kk * A_PITCH + m, img, ok ? off : -tap_off, ok);
            }
            mbar_arrive_cp_async(ring.full(s));
            return;
        }
#pragma unroll
        for (int e = 0; e < A_PER_THREAD; ++e) {
            const int kk = kk0 + e * (PRODUCER_THREADS / BM);
            const int h0 = __shfl_sync(0xffffffffu, lane_h0, kk), w0 = __shfl_sync(0xffffffffu, lane_w0, kk);
            const bool ok = live && (unsigned)(h0 + tap_r) < (unsigned)H && (unsigned)(w0 + tap_s) < (unsigned)W;
            cp_async_4(as + kk * A_PITCH + m, ok ? img + (h0 * W + w0) : X, ok);
        }
        mbar_arrive_cp_async(ring.full(s));
    }
};

// Slices of the k-blocks over gridDim.z; each adds its share of dW^T into dW (zeroed by `clear`).
extern "C" __global__ void __launch_bounds__(THREADS, 1)
conv_filter_grad(const ConvDims d, const float* __restrict__ X, const float* __restrict__ dY, float* __restrict__ dW,
                 const __grid_constant__ CUtensorMap dy_map, int paths) {
    const Ring ring{smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023)};
    const int CRR = d.C * d.R * d.R, bpi = (d.Ho * d.Wo + BK - 1) / BK, Kk = d.N * bpi * BK;
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const int wg = threadIdx.x / 128, wt = threadIdx.x % 128;

    if (threadIdx.x == 0) ring_init(ring, paths, &dy_map, &dy_map);
    __syncthreads();

    if (wg < PRODUCER_WGS) {  // the producer warpgroups: thread pt of PRODUCER_THREADS
        const int pt = threadIdx.x;
        regs_dealloc<GATHER_REGS>();
        const KRange kr(Kk);
        FilterGather g(X, dY, &dy_map, paths, d, bpi, m0, n0, pt);
        produce_gathered(ring, kr, pt, g);
        return;
    }

    regs_alloc<MATH_REGS>();
    const KRange kr(Kk);
    float acc[NACC];
    consume(acc, ring, kr, wg, wt);
    if (kr.count == 0) return;
    // Row gm is tap gm, column n the output map n0 + n: dW[n0 + n, gm], adjacent taps adjacent.
    const int gm = m0 + consumer_row(wg, wt);
    if (gm >= CRR) return;
    for_each_pair(acc, wt, [&](int n, float v0, float v1) {
        const int k = n0 + n;
        if (k >= d.K) return;
        atomicAdd(dW + (size_t)k * CRR + gm, v0);
        if (gm + 1 < CRR) atomicAdd(dW + (size_t)k * CRR + gm + 1, v1);
    });
}

