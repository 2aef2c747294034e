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

// The conditioned distance: max over i of |out[i] - ref[i]| / mag[i], where mag is the sum of the magnitudes
// that enter output i (GEMM: |alpha|(|A||B|) + |beta||C0|, float64, made on the host beside the reference).
// The maximum of non-negative doubles is the maximum of their bit patterns as unsigned integers, so one
// atomicMax per warp keeps it. A non-finite out[i], or an error where mag[i] is 0, is +inf.
//
// Launch: any grid of 256-thread blocks (grid-stride); acc[0] must be zeroed first.
extern "C" __global__ void max_ratio(const float* __restrict__ out, const double* __restrict__ ref,
                                     const double* __restrict__ mag, int n, unsigned long long* __restrict__ acc) {
    double worst = 0.0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const double o = (double)out[i];
        const double d = fabs(o - ref[i]);
        double r;
        if (!isfinite(o) || isnan(d)) r = __longlong_as_double(0x7ff0000000000000ll);
        else if (mag[i] > 0.0) r = d / mag[i];
        else r = d > 0.0 ? __longlong_as_double(0x7ff0000000000000ll) : 0.0;
        worst = fmax(worst, r);
    }
    for (int off = 16; off > 0; off >>= 1) worst = fmax(worst, __shfl_down_sync(0xffffffffu, worst, off));
    if ((threadIdx.x & 31) == 0) atomicMax(acc, (unsigned long long)__double_as_longlong(worst));
}
