// Shared by the MLP ladder (kernels_cu/mlp/): the memory layout and the unit.
//
// Layout (the seed's): all neuron outputs in one array, layer after layer, the input layer first;
// all weights in one array, layer after layer, each neuron's incoming weights contiguous and its
// bias last, so neuron j of a layer with n_in inputs owns w[j*(n_in+1) .. j*(n_in+1)+n_in].
// Deltas use the outputs' offsets; momentum velocities use the weights' offsets.
#pragma once

__device__ __forceinline__ float sigmoid(float z) { return 1.0f / (1.0f + __expf(-z)); }
