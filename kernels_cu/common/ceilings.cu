// Device ceilings, measured with our own kernels (`nnbench devices --measure`): the FP32 FMA rate
// and the device-to-device copy bandwidth. Every roofline and "% of peak" is judged against these
// as well as against the datasheet numbers.
//
// fma_peak: CHAINS independent FMA chains per thread, so each warp scheduler always has an FMA
//           ready despite the ~4-cycle dependent-issue latency; values stay in (0, 1] so there
//           are no denormals or infs. FLOPs = 2 * CHAINS * iters * threads.
// copy_bw:  grid-stride float4 copy; bytes moved = 2 * n * 16 (read + write).
// handoff:  the latency floor of one exchange between SMs, what a persistent kernel pays per
//           phase at least (kernels_cu/mlp/08_fused_tagged.cu): blocks 0 and 1 pass a tagged
//           8-byte value back and forth `rounds` times through L2 (st.relaxed / polling
//           ld.relaxed, as fused does); one-way latency = time / (2 rounds).
// grid_barrier: `rounds` counter barriers across the grid (release add, acquire poll, as
//           fused-barrier's): time / rounds per barrier.
// handoff and grid_barrier wait for other blocks; a wait longer than timeout_ns (a partner that is
// not resident or never arrives) sets *status and ends the kernel (common/patience.cuh), and the
// host raises an error: never a hung GPU.
#include "common/patience.cuh"

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

__device__ __forceinline__ unsigned long long poll_relaxed(const unsigned long long* p) {
    unsigned long long v;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

extern "C" __global__ void handoff(unsigned long long* box, int rounds, int* status, long long timeout_ns) {
    if (threadIdx.x != 0) return;
    const int me = blockIdx.x;  // 0 sends the odd values, 1 the even ones
    Patience patience{status, timeout_ns};
    for (unsigned long long k = 1 + me; k <= 2ull * rounds; k += 2) {
        if (k > 1)
            while (poll_relaxed(box) != k - 1)
                if (!patience.still()) return;
        asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(box), "l"(k) : "memory");
    }
}

extern "C" __global__ void grid_barrier(unsigned* count, int rounds, int* status, long long timeout_ns) {
    __shared__ bool gave_up;
    Patience patience{status, timeout_ns};
    for (int r = 1; r <= rounds; ++r) {
        __syncthreads();
        if (threadIdx.x == 0) {
            asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(count), "r"(1u) : "memory");
            const unsigned want = r * gridDim.x;
            unsigned v;
            bool waiting;
            do {
                asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(count) : "memory");
                waiting = (int)(v - want) < 0;
            } while (waiting && patience.still());
            gave_up = waiting;
        }
        __syncthreads();
        if (gave_up) return;  // the whole block leaves together
    }
}
