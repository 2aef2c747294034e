// MLP step 4: kernel-call minimization (the seed's "KCM"): the momentum and rate updates merged.
//
// Idea:   step 1 updates each layer's weights in two launches that each read and write every
//         weight; one kernel does both (v = momentum*v + rate*delta*o_prev; w += v), halving the
//         update's launches and its memory traffic. Forward and deltas are step 1's kernels.
// Source: seed 003, "KCM". Params: THREADS (the seed built KCM on 32-thread blocks).
// Launch: grid ceil(n / THREADS) per layer.
#include "mlp/01_neuron_per_thread.cu"

extern "C" __global__ void update_merged(float* __restrict__ w, float* __restrict__ v,
                                         const float* __restrict__ delta, const float* __restrict__ in, int n_in,
                                         int n_out, float rate, float momentum) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n_out) return;
    const size_t base = (size_t)j * (n_in + 1);
    const float rd = rate * delta[j];
    for (int k = 0; k <= n_in; ++k) {
        const float vk = momentum * v[base + k] + rd * (k < n_in ? in[k] : 1.0f);
        v[base + k] = vk;
        w[base + k] += vk;
    }
}
