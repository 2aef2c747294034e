// Conv step 2: direct convolution with the filters in constant memory.
//
// Idea:   the seed's first fix. All threads of a warp read the same filter value at the same time
//         (same k, c, p, q), which is exactly the broadcast the constant cache serves in one
//         transaction, and it takes the filter reads off the L1/L2 path the inputs use.
// Source: seed 004 ("Using constant memory caching").
// Params: TILE in {8, 16, 32}. Constant memory holds MAX_FILTER floats (64 KiB): a filter bank that
//         does not fit runs in chunks of output maps, the host copying each chunk into `filters`
//         (a device-to-device copy, ordered with the launches) before its launch; k0 is the
//         chunk's first map. One output map's filters (C*R*R) must fit, or the host refuses.
// Launch: block (TILE, TILE); grid (maps in the chunk, cdiv(Ho, TILE) * cdiv(Wo, TILE), N).
#include "conv/conv_common.cuh"

#ifndef TILE
#define TILE 16
#endif
#define MAX_FILTER 16384

__constant__ float filters[MAX_FILTER];

extern "C" __global__ void __launch_bounds__(TILE * TILE)
conv_forward(ConvDims d, const float* __restrict__ X, int k0, float* __restrict__ Y) {
    const int tiles_w = (d.Wo + TILE - 1) / TILE;
    const int kc = blockIdx.x, k = k0 + kc, n = blockIdx.z;
    const int h = (blockIdx.y / tiles_w) * TILE + threadIdx.y;
    const int w = (blockIdx.y % tiles_w) * TILE + threadIdx.x;
    if (h >= d.Ho || w >= d.Wo) return;
    float acc = 0.0f;
    for (int c = 0; c < d.C; ++c)
        for (int p = 0; p < d.R; ++p)
            for (int q = 0; q < d.R; ++q)
                acc += x_at(X, d, n, c, h * d.stride - d.pad + p, w * d.stride - d.pad + q) *
                       filters[((kc * d.C + c) * d.R + p) * d.R + q];
    Y[((size_t)(n * d.K + k) * d.Ho + h) * d.Wo + w] = acc;
}
