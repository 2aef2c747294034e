// Device ceilings, measured with our own kernels (`nnbench devices --measure`): the FP32 FMA rate
// and the device-to-device copy bandwidth. Every roofline and "% of peak" is judged against these
// as well as against the datasheet numbers.
//
// fma_peak: CHAINS independent FMA chains per thread, so each warp scheduler always has an FMA
//           ready despite the ~4-cycle dependent-issue latency; values stay in (0, 1] so there
//           are no denormals or infs. FLOPs = 2 * CHAINS * iters * threads.
// copy_bw:  grid-stride float4 copy; bytes moved = 2 * n * 16 (read + write).
#ifndef CHAINS
#define CHAINS 8
#endif

extern "C" __global__ void fma_peak(float* __restrict__ out, int iters, float b, float c) {
    float acc[CHAINS];
#pragma unroll
    for (int i = 0; i < CHAINS; ++i) acc[i] = (threadIdx.x + i) * 1e-3f;
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int r = 0; r < 16; ++r)
#pragma unroll
            for (int i = 0; i < CHAINS; ++i) acc[i] = fmaf(acc[i], b, c);
    }
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < CHAINS; ++i) s += acc[i];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;  // keeps every chain live
}

extern "C" __global__ void copy_bw(const float4* __restrict__ src, float4* __restrict__ dst, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        dst[i] = src[i];
}
