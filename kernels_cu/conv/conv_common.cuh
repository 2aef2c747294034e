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

// The direct method's sum for output (n, ., h, w), the filter value of (c, p, q) read through
// `filter`: steps 1 and 2 differ only in where that value lives.
template <class Filter>
__device__ __forceinline__ float direct_sum(const ConvDims& d, const float* __restrict__ X, int n, int h, int w,
                                            Filter filter) {
    float acc = 0.0f;
    for (int c = 0; c < d.C; ++c)
        for (int p = 0; p < d.R; ++p)
            for (int q = 0; q < d.R; ++q)
                acc += x_at(X, d, n, c, h * d.stride - d.pad + p, w * d.stride - d.pad + q) * filter(c, p, q);
    return acc;
}

// The output pixel of this thread in the seed's grid: block (TILE, TILE), blockIdx.y = tile index.
template <int TILE_>
__device__ __forceinline__ bool output_pixel(const ConvDims& d, int& h, int& w) {
    const int tiles_w = (d.Wo + TILE_ - 1) / TILE_;
    h = (blockIdx.y / tiles_w) * TILE_ + threadIdx.y;
    w = (blockIdx.y % tiles_w) * TILE_ + threadIdx.x;
    return h < d.Ho && w < d.Wo;
}

// The backward gather for input element (n, c, h, w): term(p, q, ho, wo) for every filter tap
// (p, q) whose output (ho, wo) read this element in the forward pass (col2im and the direct data
// gradient both sum this way, one thread per input element, without atomics).
template <class Term>
__device__ __forceinline__ float gather_taps(const ConvDims& d, int h, int w, Term term) {
    float g = 0.0f;
    for (int p = 0; p < d.R; ++p) {
        const int hp = h + d.pad - p;
        if (hp < 0 || hp % d.stride || hp / d.stride >= d.Ho) continue;
        for (int q = 0; q < d.R; ++q) {
            const int wq = w + d.pad - q;
            if (wq < 0 || wq % d.stride || wq / d.stride >= d.Wo) continue;
            g += term(p, q, hp / d.stride, wq / d.stride);
        }
    }
    return g;
}

// Element t of an (N, C, H, W) tensor as its coordinates.
__device__ __forceinline__ void nchw(long long t, int C, int H, int W, int& n, int& c, int& h, int& w) {
    w = (int)(t % W);
    h = (int)((t / W) % H);
    c = (int)((t / ((long long)W * H)) % C);
    n = (int)(t / ((long long)W * H * C));
}

// The sum of every thread's v over a block of NT threads (a shared-memory tree); every thread
// gets it back. `part` is NT floats of shared memory.
template <int NT>
__device__ __forceinline__ float block_sum(float v, float* part) {
    part[threadIdx.x] = v;
    __syncthreads();
    for (int s = NT / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    return part[0];
}
