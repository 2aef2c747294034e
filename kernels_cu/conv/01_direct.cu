// Conv step 1: direct convolution, one thread per output element (the seed's parallel kernel).
//
// Idea:   the seed's ConvLayerForward_Kernel: a block computes a TILE x TILE tile of one output
//         map; the grid is (K output maps, tiles of the map, N images). Every multiply-add reads
//         its input and its filter value from global memory (the L1/L2 caches are what saves it).
// Source: seed 004 ("A parallel implementation"); stride and zero padding added.
// Params: TILE in {8, 16, 32}: the block is TILE x TILE threads.
// Launch: block (TILE, TILE); grid (K, cdiv(Ho, TILE) * cdiv(Wo, TILE), N).
#include "common/plant.cuh"
#include "conv/conv_common.cuh"

#ifndef TILE
#define TILE 16
#endif

extern "C" __global__ void __launch_bounds__(TILE * TILE)
conv_forward(ConvDims d, const float* __restrict__ X, const float* __restrict__ Wt, float* __restrict__ Y) {
    const int k = blockIdx.x, n = blockIdx.z;
    int h, w;
    if (!output_pixel<TILE>(d, h, w)) return;
    plant_slowdown();  // nothing unless a gate test plants it (common/plant.cuh)
    const float* wk = Wt + (size_t)k * d.C * d.R * d.R;
    Y[((size_t)(n * d.K + k) * d.Ho + h) * d.Wo + w] =
        direct_sum(d, X, n, h, w, [&](int c, int p, int q) { return wk[(c * d.R + p) * d.R + q]; });
}
