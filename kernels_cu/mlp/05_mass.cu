// MLP step 5: "mass" (the seed's name): one block per neuron, one thread per weight.
//
// Idea:   step 1 gives each neuron one thread that walks its n_in weights in a serial chain; here a
//         block of MASS_THREADS threads shares the neuron's dot product (each thread a strided
//         slice, then a shared-memory tree reduction), and the update gives every weight its own
//         thread. Far more threads for wide layers (Net 8: 500 x 501 per layer), and coalesced
//         weight reads in the forward pass, where step 1's threads stride by a whole row.
// Source: seed 003, "Vectorized Mass Version". Params: MASS_THREADS (a power of two, <= 1024).
// Launch: forward and delta_hidden: grid n (one block per neuron), block MASS_THREADS;
//         updates: grid ceil(n_out * (n_in + 1) / 256), block 256 (one thread per weight).
// Update: two kernels, as in step 1; step 4 merges them.
#include "mlp/mlp_common.cuh"

#ifndef MASS_THREADS
#define MASS_THREADS 128
#endif
static_assert((MASS_THREADS & (MASS_THREADS - 1)) == 0 && MASS_THREADS <= 1024, "MASS_THREADS: a power of two");

__device__ __forceinline__ float block_sum(float s) {
    __shared__ float part[MASS_THREADS];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int h = MASS_THREADS / 2; h > 0; h >>= 1) {
        if (threadIdx.x < h) part[threadIdx.x] += part[threadIdx.x + h];
        __syncthreads();
    }
    return part[0];
}

extern "C" __global__ void forward(const float* __restrict__ w, const float* __restrict__ in,
                                   float* __restrict__ out, int n_in, int n_out) {
    const int j = blockIdx.x;
    const float* wj = w + (size_t)j * (n_in + 1);
    float s = 0.0f;
    for (int k = threadIdx.x; k < n_in; k += MASS_THREADS) s += wj[k] * in[k];
    s = block_sum(s);
    if (threadIdx.x == 0) out[j] = sigmoid(s + wj[n_in]);
}

extern "C" __global__ void delta_hidden(const float* __restrict__ o, const float* __restrict__ w_next,
                                        const float* __restrict__ delta_next, float* __restrict__ delta, int n,
                                        int n_next) {
    const int j = blockIdx.x;
    float s = 0.0f;
    for (int k = threadIdx.x; k < n_next; k += MASS_THREADS) s += delta_next[k] * w_next[(size_t)k * (n + 1) + j];
    s = block_sum(s);
    if (threadIdx.x == 0) delta[j] = o[j] * (1.0f - o[j]) * s;
}

extern "C" __global__ void update_momentum(float* __restrict__ w, const float* __restrict__ v, int n_in, int n_out,
                                           float momentum) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_out * (n_in + 1)) return;
    w[i] += momentum * v[i];
}

extern "C" __global__ void update_rate(float* __restrict__ w, float* __restrict__ v, const float* __restrict__ delta,
                                       const float* __restrict__ in, int n_in, int n_out, float rate,
                                       float momentum) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_out * (n_in + 1)) return;
    const int j = i / (n_in + 1), k = i - j * (n_in + 1);
    const float g = rate * delta[j] * (k < n_in ? in[k] : 1.0f);
    w[i] += g;
    v[i] = momentum * v[i] + g;
}
