// Conv step 4: unroll (im2col), then a GEMM on the ladder's best kernel.
//
// Idea:   the seed's "Unrolling Convolution Layers": lay every receptive field out as a column, so
//         the convolution of one image becomes one matrix product, which the GEMM ladder already
//         runs at ~90% of cuBLAS. In nnbench's column-major GEMM, for image n:
//           Y_n^T (Ho*Wo x K) = U_n^T (Ho*Wo x C*R*R) . Wt^T (C*R*R x K)
//         where U_n is (C*R*R) x (Ho*Wo), row-major (row c*R*R + p*R + q, column h*Wo + w): the
//         seed's X_unroll[h_unroll, w_unroll]. Read column-major, U_n is exactly the GEMM's A
//         operand, Wt (K, C, R, R) is its B operand, and Y_n in NCHW is its C: no transposes.
//         The price is the workspace: U holds every input value R*R times (the K^2 blow-up).
// Source: seed 004 (unroll_Kernel), with stride and zero padding; one thread per (c, output pixel)
//         as in the seed, writing a strip of R*R rows.
// Launch: 1-D, grid-stride over N_IMG * C * Ho * Wo; U for image j at U + j * C*R*R*Ho*Wo.
#include "conv/conv_common.cuh"

extern "C" __global__ void unroll(ConvDims d, const float* __restrict__ X, float* __restrict__ U, int n0, int images) {
    const int hw = d.Ho * d.Wo;
    const long long total = (long long)images * d.C * hw;
    for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < total;
         t += (long long)gridDim.x * blockDim.x) {
        const int col = (int)(t % hw), c = (int)((t / hw) % d.C), j = (int)(t / ((long long)hw * d.C));
        const int h = col / d.Wo, w = col % d.Wo;
        float* u = U + (size_t)j * d.C * d.R * d.R * hw;
        for (int p = 0; p < d.R; ++p)
            for (int q = 0; q < d.R; ++q)
                u[(size_t)((c * d.R + p) * d.R + q) * hw + col] =
                    x_at(X, d, n0 + j, c, h * d.stride - d.pad + p, w * d.stride - d.pad + q);
    }
}
