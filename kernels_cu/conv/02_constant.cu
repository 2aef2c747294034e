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
    const int kc = blockIdx.x, k = k0 + kc, n = blockIdx.z;
    int h, w;
    if (!output_pixel<TILE>(d, h, w)) return;
    const int base = kc * d.C * d.R * d.R;
    Y[((size_t)(n * d.K + k) * d.Ho + h) * d.Wo + w] =
        direct_sum(d, X, n, h, w, [&](int c, int p, int q) { return filters[base + (c * d.R + p) * d.R + q]; });
}
