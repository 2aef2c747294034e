// A user's kernel, as nnbench's kernel suite sees it: any .cu file with a __global__ entry.
// c[i] = a[i] + b[i]; ITEMS elements per thread, BLOCK threads per block (both -D macros that the
// config's axes sweep). Any n: the tail is guarded, so odd sizes are fine.
#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef ITEMS
#define ITEMS 1
#endif

extern "C" __global__ void vector_add(const float* __restrict__ a, const float* __restrict__ b,
                                      float* __restrict__ c, int n) {
    const long long base = (long long)blockIdx.x * BLOCK * ITEMS + threadIdx.x;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const long long j = base + (long long)i * BLOCK;
        if (j < n) c[j] = a[j] + b[j];
    }
}
