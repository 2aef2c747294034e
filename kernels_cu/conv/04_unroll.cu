// Conv step 4: unroll (im2col), then a GEMM on the ladder's best kernel.
//
// Idea:   the seed's "Unrolling Convolution Layers": lay every receptive field out as a column, so
//         the convolution becomes one matrix product, which the GEMM ladder already runs at ~90% of
//         cuBLAS. The seed unrolls and multiplies one image at a time; at N = 32 and Ho*Wo = 3,136
//         one image's GEMM (3,136 x K=64) fills 25 of 132 SMs. Here all N images are unrolled side
//         by side, U (C*R*R rows, N*Ho*Wo columns, row-major: row c*R*R + p*R + q, column
//         n*Ho*Wo + h*Wo + w), and one GEMM in nnbench's column-major convention computes
//           Z (N*Ho*Wo x K) = U^T (N*Ho*Wo x C*R*R) . Wt^T (C*R*R x K)
//         with U read as the column-major A operand and Wt (K, C, R, R) as B, no transposes. Z is
//         (K, N, Ho*Wo) in memory; `to_nchw` moves it to Y (N, K, Ho, Wo).
//         The price is the workspace: U holds every input value R*R times (the K^2 blow-up).
// Source: seed 004 (unroll_Kernel), batched over the images, with stride and zero padding; one
//         thread per (c, output pixel) as in the seed, writing a strip of R*R rows.
// Launch: 1-D grid-stride loops.
#include "conv/conv_common.cuh"

extern "C" __global__ void unroll(ConvDims d, const float* __restrict__ X, float* __restrict__ U) {
    const int hw = d.Ho * d.Wo;
    const long long cols = (long long)d.N * hw, total = cols * d.C;
    for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < total;
         t += (long long)gridDim.x * blockDim.x) {
        const long long col = t % cols;  // n * hw + pixel
        const int c = (int)(t / cols), n = (int)(col / hw), pix = (int)(col % hw);
        const int h = pix / d.Wo, w = pix % d.Wo;
        for (int p = 0; p < d.R; ++p)
            for (int q = 0; q < d.R; ++q)
                U[(size_t)((c * d.R + p) * d.R + q) * cols + col] =
                    x_at(X, d, n, c, h * d.stride - d.pad + p, w * d.stride - d.pad + q);
    }
}

// Z (K, N, Ho*Wo) -> Y (N, K, Ho*Wo).
extern "C" __global__ void to_nchw(ConvDims d, const float* __restrict__ Z, float* __restrict__ Y) {
    const long long hw = (long long)d.Ho * d.Wo, total = (long long)d.N * d.K * hw;
    for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < total;
         t += (long long)gridDim.x * blockDim.x) {
        const long long pix = t % hw, k = (t / hw) % d.K, n = t / (hw * d.K);
        Y[t] = Z[(k * d.N + n) * hw + pix];
    }
}
