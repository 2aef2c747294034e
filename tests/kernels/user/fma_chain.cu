// Test kernel for the kernel suite's GPU tests and the pytest plugin's regression gate: a compute-bound
// chain of ITERS dependent FMAs per element. NNBENCH_PLANT="PLANT_SLOWDOWN=1" adds ITERS / 10 more
// FMAs on a second chain whose value cannot change the output: 10% more work, the same answer.
#include "common/plant.cuh"
#ifndef ITERS
#define ITERS 4096
#endif

extern "C" __global__ void fma_chain(const float* __restrict__ x, float* __restrict__ y, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float a = x[i];
    float acc = 0.0f, extra = a;
    for (int k = 0; k < ITERS; ++k) acc = fmaf(acc, 0.999f, a);
#if PLANT_SLOWDOWN > 0
    for (int k = 0; k < ITERS / 10; ++k) extra = fmaf(extra, 0.999f, a);
#endif
    y[i] = acc + (extra == 12345.0f ? 1.0f : 0.0f);  // inputs lie in [-1, 1]: never 12345
}

// Faults for the sweep's ERROR rows: an illegal address, and a kernel that never ends.
extern "C" __global__ void wild_write(const float* __restrict__ x, float* __restrict__ y, int n) {
    y[(long long)(blockIdx.x * blockDim.x + threadIdx.x) * 1000000007LL + (1LL << 40)] = x[0];
}

extern "C" __global__ void spin_forever(const float* __restrict__ x, float* __restrict__ y, int n) {
    // Waits for a value the inputs never hold (they are in [-1, 1]): a real load each round, so the
    // compiler cannot prove the loop endless and drop it, as it may a loop on a local.
    while (*(volatile const float*)x != 12345.0f) {
    }
}
