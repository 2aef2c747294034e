// Conv step 7: the backward pass of the direct method, without unrolling (no workspace).
//
// Idea:   the data gradient is a convolution of dY with the filters flipped and transposed:
//         each input element gathers the output gradients whose receptive fields cover it (one
//         thread per input element, as step 1 is one thread per output element). The filter
//         gradient dW[k,c,p,q] = sum over n, h, w of dY[n,k,h,w] * x[n,c,h*s-pad+p,w*s-pad+q] is a
//         reduction over N*Ho*Wo terms per weight: one block per weight, its threads striding
//         over the terms, then a shared-memory tree.
// Source: the standard convolution backward (e.g. cuDNN's direct algorithms); seed 004 gives the
//         forward loops this transposes.
// Params: THREADS (the filter-gradient block) in {128, 256}.
#include "conv/conv_common.cuh"

#ifndef THREADS
#define THREADS 256
#endif

extern "C" __global__ void data_grad_direct(ConvDims d, const float* __restrict__ dY, const float* __restrict__ Wt,
                                            float* __restrict__ dX) {
    const long long total = (long long)d.N * d.C * d.H * d.W;
    for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < total;
         t += (long long)gridDim.x * blockDim.x) {
        int n, c, h, w;
        nchw(t, d.C, d.H, d.W, n, c, h, w);
        const float g = gather_taps(d, h, w, [&](int p, int q, int ho, int wo) {
            float s = 0.0f;
            for (int k = 0; k < d.K; ++k)
                s += dY[((size_t)(n * d.K + k) * d.Ho + ho) * d.Wo + wo] *
                     Wt[((size_t)(k * d.C + c) * d.R + p) * d.R + q];
            return s;
        });
        dX[t] = g;
    }
}

extern "C" __global__ void __launch_bounds__(THREADS)
filter_grad_direct(ConvDims d, const float* __restrict__ X, const float* __restrict__ dY, float* __restrict__ dW) {
    __shared__ float part[THREADS];
    const int weight = blockIdx.x;  // (k, c, p, q)
    const int q = weight % d.R, p = (weight / d.R) % d.R, c = (weight / (d.R * d.R)) % d.C;
    const int k = weight / (d.R * d.R * d.C);
    const int hw = d.Ho * d.Wo;
    float g = 0.0f;
    for (int t = threadIdx.x; t < d.N * hw; t += THREADS) {
        const int n = t / hw, h = (t % hw) / d.Wo, w = t % d.Wo;
        g += dY[((size_t)(n * d.K + k)) * hw + h * d.Wo + w] *
             x_at(X, d, n, c, h * d.stride - d.pad + p, w * d.stride - d.pad + q);
    }
    const float total = block_sum<THREADS>(g, part);
    if (threadIdx.x == 0) dW[weight] = total;
}
