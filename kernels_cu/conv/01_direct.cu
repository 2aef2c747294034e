// Conv step 1: direct convolution, one thread per output element (the seed's parallel kernel).
//
// Idea:   the seed's ConvLayerForward_Kernel: a block computes a TILE x TILE tile of one output
//         map; the grid is (K output maps, tiles of the map, N images). Every multiply-add reads
//         its input and its filter value from global memory (the L1/L2 caches are what saves it).
// Source: seed 004 ("A parallel implementation"); stride and zero padding added.
// Params: TILE in {8, 16, 32}: the block is TILE x TILE threads.
// Launch: block (TILE, TILE); grid (K, cdiv(Ho, TILE) * cdiv(Wo, TILE), N).
#include "conv/conv_common.cuh"

#ifndef TILE
#define TILE 16
#endif

extern "C" __global__ void __launch_bounds__(TILE * TILE)
conv_forward(ConvDims d, const float* __restrict__ X, const float* __restrict__ Wt, float* __restrict__ Y) {
    const int tiles_w = (d.Wo + TILE - 1) / TILE;
    const int k = blockIdx.x, n = blockIdx.z;
    const int h = (blockIdx.y / tiles_w) * TILE + threadIdx.y;
    const int w = (blockIdx.y % tiles_w) * TILE + threadIdx.x;
    if (h >= d.Ho || w >= d.Wo) return;
    float acc = 0.0f;
    for (int c = 0; c < d.C; ++c)
        for (int p = 0; p < d.R; ++p)
            for (int q = 0; q < d.R; ++q)
                acc += x_at(X, d, n, c, h * d.stride - d.pad + p, w * d.stride - d.pad + q) *
                       Wt[((size_t)(k * d.C + c) * d.R + p) * d.R + q];
    Y[((size_t)(n * d.K + k) * d.Ho + h) * d.Wo + w] = acc;
}
