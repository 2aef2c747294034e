// The verifier's distance, on the GPU: sum((out - ref)^2) and sum(ref^2) in float64.
//
// The reference stays NumPy's float64 result; it is uploaded once per problem, and only the
// comparison runs here. Copying a 4096x4096 C back and reducing it in NumPy costs ~100 ms per check,
// which would dwarf the kernel time of a sweep; this costs well under a millisecond. A NaN or inf
// anywhere in `out` makes the first sum non-finite, which the host reads as an infinite error.
//
// Launch: any grid of 256-thread blocks (grid-stride); acc[0..1] must be zeroed first.

extern "C" __global__ void sq_err(const float* __restrict__ out, const double* __restrict__ ref, int n,
                                  double* __restrict__ acc) {
    double e = 0.0, r = 0.0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const double f = ref[i];
        const double d = (double)out[i] - f;
        e += d * d;
        r += f * f;
    }
    for (int off = 16; off > 0; off >>= 1) {
        e += __shfl_down_sync(0xffffffffu, e, off);
        r += __shfl_down_sync(0xffffffffu, r, off);
    }
    __shared__ double se[8], sr[8];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) { se[warp] = e; sr[warp] = r; }
    __syncthreads();
    if (warp == 0) {
        e = lane < (blockDim.x >> 5) ? se[lane] : 0.0;
        r = lane < (blockDim.x >> 5) ? sr[lane] : 0.0;
        for (int off = 4; off > 0; off >>= 1) {
            e += __shfl_down_sync(0xffffffffu, e, off);
            r += __shfl_down_sync(0xffffffffu, r, off);
        }
        if (lane == 0) { atomicAdd(&acc[0], e); atomicAdd(&acc[1], r); }
    }
}
