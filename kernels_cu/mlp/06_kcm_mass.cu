// MLP step 6: "KCM-mass": step 5's block-per-neuron forward and deltas with step 4's merged update,
// one thread per weight.
//
// Idea:   both of the seed's ideas at once: more parallelism (mass) and fewer launches (KCM).
// Source: seed 003. Params: MASS_THREADS as step 5. Launch: as step 5; update_merged like
//         update_rate (one thread per weight, blocks of 256).
#include "mlp/05_mass.cu"

extern "C" __global__ void update_merged(float* __restrict__ w, float* __restrict__ v,
                                         const float* __restrict__ delta, const float* __restrict__ in, int n_in,
                                         int n_out, float rate, float momentum) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_out * (n_in + 1)) return;
    const int j = i / (n_in + 1), k = i - j * (n_in + 1);
    const float vk = momentum * v[i] + rate * delta[j] * (k < n_in ? in[k] : 1.0f);
    v[i] = vk;
    w[i] += vk;
}
