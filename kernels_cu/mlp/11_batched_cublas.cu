// MLP step 11: the cuBLAS reference for mini-batch training: the same three GEMMs per layer as
// 10_batched.cu, each a cuBLAS SGEMM (nnbench/workloads/train/batched.py calls it through CuPy, TF32 off),
// and the work that 06 fuses into its epilogues done here as separate passes over H and D.
//
// Idea:   the yardstick for our GEMMs, and the measure of what fusion saves: every pass below
//         re-reads and re-writes a whole activation or delta matrix that 06 touches once.
// Launch: grid-stride loops; any grid.
#include "mlp/batched_common.cuh"

// H = sigmoid(H) over rows x cols at ld (the forward GEMM wrote the pre-activations).
extern "C" __global__ void sigmoid_columns(float* __restrict__ H, int ld, int rows, int cols) {
    for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < rows * cols; idx += gridDim.x * blockDim.x) {
        float* h = &H[(size_t)(idx / rows) * ld + idx % rows];
        *h = sigmoid(*h);
    }
}

// D *= h(1 - h) over rows x cols (the backward GEMM wrote W_l D_l).
extern "C" __global__ void scale_by_slope(float* __restrict__ D, int ldd, const float* __restrict__ H, int ldh,
                                          int rows, int cols) {
    for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < rows * cols; idx += gridDim.x * blockDim.x) {
        const int r = idx % rows, c = idx / rows;
        const float h = H[(size_t)c * ldh + r];
        D[(size_t)c * ldd + r] *= h * (1.0f - h);
    }
}
