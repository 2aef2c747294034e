// LeNet-5's per-element work around the convolutions (kernels_cu/conv/04 and 06 do those; the
// pooling is 05_pool.cu): bias and ReLU, their gradients, softmax cross-entropy and the SGD step.
//
// Idea:   everything in LeNet-5 that is not a convolution or a pooling is elementwise or a small
//         reduction, so it is a handful of grid-stride kernels. The fully connected layers are
//         convolutions whose filter covers the whole input (fc1: 16 x 5 x 5 -> 120 is a 5 x 5
//         convolution to a 1 x 1 output; fc2 and fc3 are 1 x 1 convolutions), so the unroll path
//         serves them too.
// Launch: 1-D grid-stride loops; bias_grad: one block of THREADS per channel.
#include "conv/conv_common.cuh"

#ifndef THREADS
#define THREADS 256
#endif

// y[n, k, p] = max(0, y + b[k]) in place (relu = 0: the bias only).
extern "C" __global__ void bias_act(float* __restrict__ Y, const float* __restrict__ b, int N, int K, int P,
                                    int relu) {
    const long long total = (long long)N * K * P;
    for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < total;
         t += (long long)gridDim.x * blockDim.x) {
        const float v = Y[t] + b[(t / P) % K];
        Y[t] = relu && v < 0.0f ? 0.0f : v;
    }
}

// dY *= (y > 0): the ReLU's gradient, given the layer's activated output y.
extern "C" __global__ void relu_grad(float* __restrict__ dY, const float* __restrict__ Y, long long total) {
    for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < total;
         t += (long long)gridDim.x * blockDim.x)
        if (Y[t] <= 0.0f) dY[t] = 0.0f;
}

// db[k] = sum over n and p of dY[n, k, p].
extern "C" __global__ void __launch_bounds__(THREADS) bias_grad(const float* __restrict__ dY, float* __restrict__ db,
                                                               int N, int K, int P) {
    __shared__ float part[THREADS];
    const int k = blockIdx.x;
    float g = 0.0f;
    for (int i = threadIdx.x; i < N * P; i += THREADS) g += dY[((size_t)(i / P) * K + k) * P + i % P];
    const float total = block_sum<THREADS>(g, part);
    if (threadIdx.x == 0) db[k] = total;
}

// Mean softmax cross-entropy over the batch: loss[0] += sum of -log p[label] / N, and
// dZ = (softmax(z) - onehot(label)) / N. One thread per sample (52 classes: a short loop).
extern "C" __global__ void softmax_xent(const float* __restrict__ Z, const int* __restrict__ labels,
                                        float* __restrict__ dZ, float* __restrict__ loss, int N, int classes) {
    for (int n = blockIdx.x * blockDim.x + threadIdx.x; n < N; n += gridDim.x * blockDim.x) {
        const float* z = Z + (size_t)n * classes;
        float m = z[0];
        for (int j = 1; j < classes; ++j) m = fmaxf(m, z[j]);
        float sum = 0.0f;
        for (int j = 0; j < classes; ++j) sum += __expf(z[j] - m);
        const int y = labels[n];
        for (int j = 0; j < classes; ++j)
            dZ[(size_t)n * classes + j] = (__expf(z[j] - m) / sum - (j == y ? 1.0f : 0.0f)) / N;
        atomicAdd(loss, (logf(sum) + m - z[y]) / N);
    }
}

// w -= rate * g.
extern "C" __global__ void sgd(float* __restrict__ W, const float* __restrict__ G, int count, float rate) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) W[i] -= rate * G[i];
}
