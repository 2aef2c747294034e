// Conv step 9: implicit GEMM on GEMM step 9's Hopper mainloop, no workspace.
//
// Idea:   step 4 writes the unrolled input U (C*R*R x N*Ho*Wo, 245 MiB at N32 C64 56x56) to global
//         memory and reads it back for the GEMM. The GEMM never needs U whole, only one BK x BM tile
//         of it at a time in shared memory, and every element of that tile is a known input value
//         (or a zero of the padding). So the producer warpgroup of step 9's ring gathers the tile
//         straight from X with 4-byte cp.async, zero-filling outside the image, into the layout the
//         consumers already read (A M-major, rows padded by 8 floats); the filters are the GEMM's
//         K-major B as they lie in memory, (K, C*R*R), and come by bulk tensor copy. The product
//           Y (N*Ho*Wo x K) = U^T (N*Ho*Wo x C*R*R) . Wt^T (C*R*R x K)
//         is then step 9's: 3xTF32 on wgmma, two consumer warpgroups, FP32-level accuracy. NCHW
//         suits it: consecutive GEMM rows are consecutive output pixels, so a warp's gather is
//         consecutive input columns (coalesced, and the R*R taps of a pixel hit L1), and the
//         epilogue writes Y in NCHW directly (no to_nchw pass).
//         Each producer thread owns one tile row for the whole K loop, so its pixel's (n, oh, ow) and
//         which of its taps' rows and columns lie in the image (one mask) are worked out once; the k of
//         an element is the same for every lane, so lane L keeps (c, r, s) of k-block row L, advanced
//         by multiplications, and the elements take theirs by shuffle: 7 instructions an element.
//         Two producer warpgroups (PRODUCER_WGS = 2, a 512-thread block) share the gather.
// Source: the implicit-GEMM convolution of cuDNN/CUTLASS ("implicit GEMM" in CUTLASS's
//         conv2d_fprop, analytic iterators); ladder step 9 (kernels_cu/gemm/09_tf32x3_wgmma.cu).
// Params: BM in {64, 128}, BN in {64, 128}, BK = 32, STAGES in {2..6}, PRODUCER_WGS in {1, 2},
//         PRECISION 3 (3xTF32) or 1 (TF32). Defaults BM=128 BN=64 STAGES=4 PRODUCER_WGS=2 PRECISION=3
//         (nnbench/registry.py): 64 output maps are one BN = 64 tile, and 128-row tiles give 2 to 6
//         full waves on the resnet layers.
// Sizes:  any layer (odd N, C, H, W, K, R, stride, pad). The filters come by tensor map when
//         C*R*R is a multiple of 4 (the 16-byte stride rule), else by the producer's cp.async
//         (`paths`). Dynamic shared memory as step 9's.
// Split-K: where the tiles make a short last wave (196 tiles on 132 SMs at N32 C128 28x28 K128: the
//         SMs were active 70% of the time, ncu), the host launches gridDim.z slices of K
//         (nnbench/workloads/conv/session.py says when). Two slices run as `conv_forward_pair`, clusters of the
//         two blocks of a tile reduced through distributed shared memory (pair_reduce); three add
//         with atomics into a zeroed Y (`clear`).
// Launch: THREADS = 128 * (BM/64 + PRODUCER_WGS); grid (ceil(N*Ho*Wo / BM), ceil(K / BN), slices);
//         sm_90a only.
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

// PAIR: the two slices of a split K as a cluster of two blocks, reduced through shared memory
// (pair_reduce) where the unpaired split zeroes Y first (`clear`) and adds with atomics.
template <bool PAIR>
__device__ __forceinline__ void forward(const ConvDims& d, const float* __restrict__ X, const float* __restrict__ Wt,
                                        float* __restrict__ Y, const CUtensorMap& w_map, int paths) {
    const Ring ring{smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023)};
    const int M = d.N * d.Ho * d.Wo, Kk = d.C * d.R * d.R;
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const int wg = threadIdx.x / 128, wt = threadIdx.x % 128;

    if (threadIdx.x == 0) {
        ring_init(ring, paths, &w_map, &w_map);
        if constexpr (PAIR) exch_init(ring);
    }
    if constexpr (PAIR) cluster_sync();  // the partner's barriers are initialised before any remote arrival
    else __syncthreads();

    if (wg < PRODUCER_WGS) {  // the producer warpgroups: thread pt of PRODUCER_THREADS
        const int pt = threadIdx.x;
        regs_dealloc<GATHER_REGS>();
        const KRange kr(Kk);
        ConvGather<false> g{
            PatchRows<false>(X, M, Kk, d.C, d.H, d.W, d.Ho, d.Wo, d.R, d.R, d.stride, -d.pad, -d.pad, m0, pt),
            FilterTiles{Wt, &w_map, Taps{d.R, d.R, 1, 0, 0}, paths, d.K, Kk, d.R, Kk, d.R * d.R}, n0, pt};
        produce_gathered(ring, kr, pt, g);
        return;
    }

    regs_alloc<MATH_REGS>();
    const KRange kr(Kk);
    float acc[NACC];
    consume(acc, ring, kr, wg, wt);
    if constexpr (PAIR) {
        if (!pair_reduce(acc, ring)) return;
    } else if (kr.count == 0) {
        return;  // an empty slice of a split K
    }
    store_nchw(acc, Y, M, PixelGrid{d.Ho, d.Wo, d.Ho, d.Wo, 1, 0, 0}, d.K, m0, n0, wg, wt, !PAIR);
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
conv_forward(const ConvDims d, const float* __restrict__ X, const float* __restrict__ Wt, float* __restrict__ Y,
             const __grid_constant__ CUtensorMap w_map, int paths) {
    forward<false>(d, X, Wt, Y, w_map, paths);
}

extern "C" __global__ void __launch_bounds__(THREADS, 1) __cluster_dims__(1, 1, 2)
conv_forward_pair(const ConvDims d, const float* __restrict__ X, const float* __restrict__ Wt, float* __restrict__ Y,
                  const __grid_constant__ CUtensorMap w_map, int paths) {
    forward<true>(d, X, Wt, Y, w_map, paths);
}
