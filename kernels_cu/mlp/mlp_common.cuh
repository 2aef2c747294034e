// Shared by the MLP ladder (kernels_cu/mlp/): the memory layout and the unit.
//
// Layout (the seed's): all neuron outputs in one array, layer after layer, the input layer first;
// all weights in one array, layer after layer, each neuron's incoming weights contiguous and its
// bias last, so neuron j of a layer with n_in inputs owns w[j*(n_in+1) .. j*(n_in+1)+n_in].
// Deltas use the outputs' offsets; momentum velocities use the weights' offsets.
#pragma once

__device__ __forceinline__ float sigmoid(float z) { return 1.0f / (1.0f + __expf(-z)); }
// The same with an approximate reciprocal (MUFU.RCP and a multiply, about 2 ulp), for where the
// correctly rounded one's refinement sits on the critical path (fused's FAST_SIGMOID, tagged.cuh).
__device__ __forceinline__ float sigmoid_approx(float z) { return __fdividef(1.0f, 1.0f + __expf(-z)); }

// The sum of x over the warp, in every lane (a butterfly, so every lane adds in the same order).
__device__ __forceinline__ float warp_sum(float x) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

// delta[j] = o(1 - o)(t - o) at the output layer, one thread per output neuron (every version);
// adds the sample's error 1/2 sum (t - o)^2 to *err, which the host reads once per epoch.
extern "C" __global__ void delta_output(const float* __restrict__ o, const float* __restrict__ t,
                                        float* __restrict__ delta, int n, float* __restrict__ err) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n) return;
    const float e = t[j] - o[j];
    delta[j] = o[j] * (1.0f - o[j]) * e;
    atomicAdd(err, 0.5f * e * e);
}
