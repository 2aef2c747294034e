// Conv step 5: pooling (subsampling) layers: average and max over S x S windows with stride S, NCHW.
//
// Idea:   the seed's subsamplingLayer_forward, one thread per output element. The seed's serial
//         code writes S[m, x, y] = 0 where it means S[m, h, w] (a typo, fixed here), and folds the
//         bias and sigmoid into the pooling; here pooling is only the pooling (the layer's bias and
//         activation belong to the network, as in LeNet-5 in PyTorch). Average pooling divides by
//         S*S; a window that runs past the edge (H or W not a multiple of S) is cut off, as with
//         floor mode in PyTorch.
// Source: seed 004 ("Coding Pooling Layers").
// Params: MODE 0 = average, 1 = max.
// Launch: 1-D, grid-stride over N * C * (H / S) * (W / S), forward and backward alike.
//         pool_backward writes every element of each window (dX's cut-off edge must be zeroed
//         by the host first): avg spreads dy / (S*S); max sends dy to the first maximum in
//         row-major order, as PyTorch does, and 0 to the rest.
#ifndef MODE
#define MODE 0
#endif

// Pooled element t of (N, C, H/S, W/S): the offset of its window's first input element.
__device__ __forceinline__ size_t window(long long t, int H, int W, int S) {
    const int Ho = H / S, Wo = W / S;
    const int w = (int)(t % Wo), h = (int)((t / Wo) % Ho);
    const long long nc = t / ((long long)Ho * Wo);
    return (size_t)nc * H * W + (size_t)h * S * W + (size_t)w * S;
}

extern "C" __global__ void pool_forward(int N, int C, int H, int W, int S, const float* __restrict__ X,
                                        float* __restrict__ Y) {
    const int Ho = H / S, Wo = W / S;
    const long long total = (long long)N * C * Ho * Wo;
    for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < total;
         t += (long long)gridDim.x * blockDim.x) {
        const float* x = X + window(t, H, W, S);
        float r = MODE == 1 ? -INFINITY : 0.0f;
        for (int p = 0; p < S; ++p)
            for (int q = 0; q < S; ++q) {
                const float v = x[(size_t)p * W + q];
                r = MODE == 1 ? fmaxf(r, v) : r + v;
            }
        Y[t] = MODE == 1 ? r : r / (S * S);
    }
}

extern "C" __global__ void pool_backward(int N, int C, int H, int W, int S, const float* __restrict__ X,
                                         const float* __restrict__ dY, float* __restrict__ dX) {
    const int Ho = H / S, Wo = W / S;
    const long long total = (long long)N * C * Ho * Wo;
    for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < total;
         t += (long long)gridDim.x * blockDim.x) {
        const size_t at = window(t, H, W, S);
        const float* x = X + at;
        float* dx = dX + at;
        int best = 0;
        if (MODE == 1) {
            float m = -INFINITY;
            for (int i = 0; i < S * S; ++i) {
                const float v = x[(size_t)(i / S) * W + i % S];
                if (v > m) { m = v; best = i; }
            }
        }
        for (int i = 0; i < S * S; ++i)
            dx[(size_t)(i / S) * W + i % S] =
                MODE == 1 ? (i == best ? dY[t] : 0.0f) : dY[t] / (S * S);
    }
}
