// MLP step 1: one thread per neuron (the seed's "simple" and "warped" versions).
//
// Idea:   a layer's neurons are independent given the layer before, so each thread computes one
//         neuron: its weighted sum and sigmoid (forward), its delta (backward), and its weights'
//         momentum and rate updates. One launch per layer per phase, as in the seed.
// Source: Kern, "Parallel Processing Neural Networks on SIMD/GPU Architectures" (seed 003):
//         THREADS = 1 is "simple" (n one-thread blocks), 32 is "warped-good", 50 "warped-bad".
// Math:   per sample, squared error E = 1/2 sum (t - o)^2, sigmoid units, classic momentum
//         (v = momentum*v + rate*delta*o_prev; w += v), which is PyTorch's SGD with momentum.
//         The seed's pseudo-code sums `errors + weights` in the hidden deltas where it means
//         errors * weights, indexes the previous layer's output by j instead of k in the update,
//         and scales the update by the momentum instead of the rate; this is the corrected math.
// Params: THREADS, threads per block. Launch: grid ceil(n / THREADS) for a layer of n neurons.
// Update: two kernels per layer, as in the seed: `update_momentum` adds momentum*v to w, then
//         `update_rate` adds rate*delta*o_prev to w and stores the new v. Step 2 (KCM) merges them.
#include "mlp/mlp_common.cuh"

// o[j] = sigmoid(w_j . in + b_j) for the n_out neurons of one layer; `in` is the previous layer's
// outputs (or the sample itself, for the first layer: no copy kernel).
extern "C" __global__ void forward(const float* __restrict__ w, const float* __restrict__ in,
                                   float* __restrict__ out, int n_in, int n_out) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n_out) return;
    const float* wj = w + (size_t)j * (n_in + 1);
    float s = wj[n_in];
    for (int k = 0; k < n_in; ++k) s += wj[k] * in[k];
    out[j] = sigmoid(s);
}

// delta[j] = o(1 - o) * sum_k delta_next[k] * w_next[k][j] for a hidden layer of n neurons whose
// next layer has n_next neurons (weights w_next, rows of n + 1).
extern "C" __global__ void delta_hidden(const float* __restrict__ o, const float* __restrict__ w_next,
                                        const float* __restrict__ delta_next, float* __restrict__ delta, int n,
                                        int n_next) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n) return;
    float s = 0.0f;
    for (int k = 0; k < n_next; ++k) s += delta_next[k] * w_next[(size_t)k * (n + 1) + j];
    delta[j] = o[j] * (1.0f - o[j]) * s;
}

// w += momentum * v, for neuron j's n_in + 1 weights (the first half of the seed's update).
extern "C" __global__ void update_momentum(float* __restrict__ w, const float* __restrict__ v, int n_in, int n_out,
                                           float momentum) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n_out) return;
    const size_t base = (size_t)j * (n_in + 1);
    for (int k = 0; k <= n_in; ++k) w[base + k] += momentum * v[base + k];
}

// g = rate * delta_j * o_prev[k] (1 for the bias); w += g; v = momentum * v + g.
extern "C" __global__ void update_rate(float* __restrict__ w, float* __restrict__ v, const float* __restrict__ delta,
                                       const float* __restrict__ in, int n_in, int n_out, float rate,
                                       float momentum) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n_out) return;
    const size_t base = (size_t)j * (n_in + 1);
    const float rd = rate * delta[j];
    for (int k = 0; k <= n_in; ++k) {
        const float g = rd * (k < n_in ? in[k] : 1.0f);
        w[base + k] += g;
        v[base + k] = momentum * v[base + k] + g;
    }
}
