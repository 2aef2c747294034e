// Shared by both mini-batch trainers (10_batched.cu on our GEMMs, 11_batched_cublas.cu beside
// cuBLAS): the batch layout and the per-element work that is not part of any GEMM.
//
// Layout, column-major, one column per sample (nnbench/workloads/train/batched.py allocates it):
//   H_l  ((n_l + 1) x B, ld = round4(n_l + 1)): layer l's outputs for the batch (H_0 = the input),
//        with a constant row of ones under them. Each layer's bias is then one more input weight:
//        the forward GEMM adds it, and the weight-gradient GEMM yields the bias gradient (the
//        row of ones times the deltas), with no kernel of their own.
//   Wt_l ((n_(l-1) + 1) x n_l, ld = round4(n_(l-1) + 1)): column o holds neuron o's incoming
//        weights and its bias last, the per-sample versions' layout (mlp_common.cuh) unchanged.
//   D_l  (n_l x B, ld = round4(n_l)): the deltas.
// Leading dimensions are multiples of 4 so that every operand takes float4 loads.
#pragma once
#include "mlp/mlp_common.cuh"

// The output layer's deltas, o(1 - o)(t - o), for every sample of the batch, and the batch's
// summed error 1/2 sum (t - o)^2 added to *err (one atomic per warp, not per element). Delta (j, b)
// goes to D[b * d_sample + j * d_neuron]: (ld, 1) for the feature-major D_l, (1, ld) for 12's DT_l.
extern "C" __global__ void output_delta_batch(const float* __restrict__ H, int ldh, const float* __restrict__ T,
                                              float* __restrict__ D, int d_sample, int d_neuron, int n, int batch,
                                              float* __restrict__ err) {
    float e2 = 0.0f;
    for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < n * batch; idx += gridDim.x * blockDim.x) {
        const int j = idx % n, b = idx / n;
        const float o = H[(size_t)b * ldh + j];
        const float e = T[(size_t)b * n + j] - o;
        D[(size_t)b * d_sample + (size_t)j * d_neuron] = o * (1.0f - o) * e;
        e2 += e * e;
    }
    e2 = warp_sum(e2);
    if (threadIdx.x % 32 == 0 && e2 != 0.0f) atomicAdd(err, 0.5f * e2);
}

// Classic momentum on the batch's summed gradient, split over `slices` partial sums of the
// weight-gradient GEMM (split-K; slice s at G + s*slice_stride):
//   v = momentum * v + rate * sum_s G_s;  W += v    (rate already divided by the batch size)
// Over the rows x cols valid part of Wt_l; the padding rows are never touched.
extern "C" __global__ void momentum_update(float* __restrict__ W, float* __restrict__ V,
                                           const float* __restrict__ G, int ld, int rows, int cols,
                                           int slices, long long slice_stride, float rate, float momentum) {
    for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < rows * cols; idx += gridDim.x * blockDim.x) {
        const size_t at = (size_t)(idx / rows) * ld + idx % rows;
        float g = 0.0f;
        for (int s = 0; s < slices; ++s) g += G[at + s * slice_stride];
        const float v = momentum * V[at] + rate * g;
        V[at] = v;
        W[at] += v;
    }
}

// Data-parallel runs: the split-K slices of one layer's weight gradient summed into its part of
// the flat buffer that the ranks allreduce (momentum_update then reads it as a single slice).
extern "C" __global__ void sum_slices(const float* __restrict__ G, int ld, int rows, int cols, int slices,
                                      long long slice_stride, float* __restrict__ out) {
    for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < rows * cols; idx += gridDim.x * blockDim.x) {
        const size_t at = (size_t)(idx / rows) * ld + idx % rows;
        float g = 0.0f;
        for (int s = 0; s < slices; ++s) g += G[at + s * slice_stride];
        out[at] = g;
    }
}
