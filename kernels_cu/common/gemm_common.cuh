// Shared by every step of the GEMM ladder.
//
// Layout (the whole ladder, as in cuBLAS and the seed lecture): column-major, no transposes.
//   A is M x K: A(m, k) = A[m + k*M]
//   B is K x N: B(k, n) = B[k + n*K]
//   C is M x N: C(m, n) = C[m + n*M]
//   C = alpha * A * B + beta * C
// Every kernel is `extern "C" __global__ void gemm(M, N, K, alpha, A, B, beta, C)` so the runtime
// can load any step by the same name and argument list.
#pragma once

// BLAS semantics: with beta == 0, C is write-only and is never read. The verifier relies on this:
// it fills C with NaN before a beta == 0 run, so an element a kernel forgot to write stays NaN.
__device__ __forceinline__ float gemm_epilogue(float acc, float alpha, float beta, const float* c) {
    return beta == 0.0f ? alpha * acc : alpha * acc + beta * (*c);
}

// A 16-byte access of A, B or C is legal only when the element's linear index is a multiple of 4,
// which holds for every float4 we issue exactly when the leading dimension is a multiple of 4.
// The check is uniform across the grid, so the scalar fallback costs no divergence.
__device__ __forceinline__ bool ld_is_vec4(int ld) { return (ld & 3) == 0; }

// Load 4 consecutive elements along the contiguous dimension, zero-filling past `limit`.
__device__ __forceinline__ float4 load4_guarded(const float* __restrict__ p, int i, int limit, bool vec) {
    if (vec && i + 3 < limit) return *reinterpret_cast<const float4*>(p + i);
    float4 r;
    r.x = (i + 0 < limit) ? p[i + 0] : 0.0f;
    r.y = (i + 1 < limit) ? p[i + 1] : 0.0f;
    r.z = (i + 2 < limit) ? p[i + 2] : 0.0f;
    r.w = (i + 3 < limit) ? p[i + 3] : 0.0f;
    return r;
}

// Write 4 consecutive C elements of one column through the epilogue, guarded at the edge.
__device__ __forceinline__ void store4_epilogue(float* __restrict__ c, int i, int limit, bool vec,
                                                float4 acc, float alpha, float beta) {
    if (vec && i + 3 < limit) {
        float4 r;
        if (beta == 0.0f) {
            r = make_float4(alpha * acc.x, alpha * acc.y, alpha * acc.z, alpha * acc.w);
        } else {
            const float4 old = *reinterpret_cast<const float4*>(c + i);
            r = make_float4(alpha * acc.x + beta * old.x, alpha * acc.y + beta * old.y,
                            alpha * acc.z + beta * old.z, alpha * acc.w + beta * old.w);
        }
        *reinterpret_cast<float4*>(c + i) = r;
        return;
    }
    const float v[4] = {acc.x, acc.y, acc.z, acc.w};
#pragma unroll
    for (int j = 0; j < 4; ++j)
        if (i + j < limit) c[i + j] = gemm_epilogue(v[j], alpha, beta, c + i + j);
}
