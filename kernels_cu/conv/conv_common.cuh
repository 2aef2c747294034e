// Shared by the convolution ladder (kernels_cu/conv/).
//
// Layout: NCHW, fp32, as in the seed and cuDNN's default. Names as in the issue (the seed calls the
// filter count M and the filter size K):
//   X  (N, C, H, W)        input           X[((n*C + c)*H + h)*W + w]
//   Wt (K, C, R, R)        filters         Wt[((k*C + c)*R + p)*R + q]
//   Y  (N, K, Ho, Wo)      output          Ho = (H + 2*pad - R)/stride + 1, Wo likewise
// y[n,k,h,w] = sum_{c,p,q} x[n, c, h*stride - pad + p, w*stride - pad + q] * wt[k,c,p,q], with x = 0
// outside the image (zero padding). stride = 1, pad = 0 is the seed's K x K "valid" form.
#pragma once

struct ConvDims {
    int N, C, H, W, K, R, stride, pad, Ho, Wo;
};

__device__ __forceinline__ float x_at(const float* __restrict__ X, const ConvDims& d, int n, int c, int h, int w) {
    return (h >= 0 && h < d.H && w >= 0 && w < d.W) ? X[((size_t)(n * d.C + c) * d.H + h) * d.W + w] : 0.0f;
}
