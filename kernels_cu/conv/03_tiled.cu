// Conv step 3: shared-memory tiled direct convolution (input tile plus halo, filters staged too).
//
// Idea:   steps 1 and 2 read each input value R*R times per output map, and once more for every
//         output map. Here a block stages, per group of CB input channels, the input patch its
//         TILE x TILE outputs need (the tile plus an R-1 halo, times the stride) and the CB filter
//         slices of KB output maps in shared memory; each thread then keeps KB accumulators, so
//         every staged input value serves R*R*KB multiply-adds from shared memory.
// Source: seed 004 ("Using shared memory tiling"), with the output-map blocking of register
//         tiling (the GEMM ladder's step 3 idea) over k.
// Params: TILE in {8, 16}: outputs per block side; KB in {4, 8, 16}: output maps per block.
//         Compile-time limits RMAX = 11 (filter size) and SMAX = 2 (stride); the host refuses
//         larger filters or strides for this path.
// Launch: block (TILE, TILE); grid (cdiv(K, KB), cdiv(Ho, TILE) * cdiv(Wo, TILE), N).
#include "conv/conv_common.cuh"

#ifndef TILE
#define TILE 16
#endif
#ifndef KB
#define KB 8
#endif
#define CB 4
#define RMAX 11
#define SMAX 2
#define IN ((TILE - 1) * SMAX + RMAX)

extern "C" __global__ void __launch_bounds__(TILE * TILE)
conv_forward(ConvDims d, const float* __restrict__ X, const float* __restrict__ Wt, float* __restrict__ Y) {
    __shared__ float patch[CB][IN][IN];
    __shared__ float filt[KB][CB][RMAX * RMAX];
    const int tiles_w = (d.Wo + TILE - 1) / TILE;
    const int k0 = blockIdx.x * KB, n = blockIdx.z;
    const int oh0 = (blockIdx.y / tiles_w) * TILE, ow0 = (blockIdx.y % tiles_w) * TILE;
    const int tid = threadIdx.y * TILE + threadIdx.x;
    const int in_h = (TILE - 1) * d.stride + d.R, in_w = in_h;  // the patch this tile needs
    const int ih0 = oh0 * d.stride - d.pad, iw0 = ow0 * d.stride - d.pad;
    const int RR = d.R * d.R;
    float acc[KB];
#pragma unroll
    for (int kb = 0; kb < KB; ++kb) acc[kb] = 0.0f;

    for (int c0 = 0; c0 < d.C; c0 += CB) {
        for (int i = tid; i < CB * in_h * in_w; i += TILE * TILE) {
            const int cc = i / (in_h * in_w), r = (i / in_w) % in_h, s = i % in_w;
            patch[cc][r][s] = c0 + cc < d.C ? x_at(X, d, n, c0 + cc, ih0 + r, iw0 + s) : 0.0f;
        }
        for (int i = tid; i < KB * CB * RR; i += TILE * TILE) {
            const int kb = i / (CB * RR), cc = (i / RR) % CB, pq = i % RR;
            const int k = k0 + kb, c = c0 + cc;
            filt[kb][cc][pq] = (k < d.K && c < d.C) ? Wt[((size_t)k * d.C + c) * RR + pq] : 0.0f;
        }
        __syncthreads();
        for (int cc = 0; cc < CB; ++cc)
            for (int p = 0; p < d.R; ++p)
                for (int q = 0; q < d.R; ++q) {
                    const float v = patch[cc][threadIdx.y * d.stride + p][threadIdx.x * d.stride + q];
#pragma unroll
                    for (int kb = 0; kb < KB; ++kb) acc[kb] += v * filt[kb][cc][p * d.R + q];
                }
        __syncthreads();
    }
    const int h = oh0 + threadIdx.y, w = ow0 + threadIdx.x;
    if (h >= d.Ho || w >= d.Wo) return;
#pragma unroll
    for (int kb = 0; kb < KB; ++kb)
        if (k0 + kb < d.K) Y[((size_t)(n * d.K + k0 + kb) * d.Ho + h) * d.Wo + w] = acc[kb];
}
