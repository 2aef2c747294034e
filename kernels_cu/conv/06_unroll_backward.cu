// Conv step 6: the backward pass of the unroll path (data and filter gradients), as GEMMs.
//
// Idea:   with U the unrolled input of step 4 (C*R*R rows, N*Ho*Wo columns) and dZ the output
//         gradient in the same (K, N, Ho*Wo) order as step 4's Z, both gradients are matrix
//         products on the ladder's 3xTF32 mainloop, in either operand layout (common/tf32x3.cuh):
//           filter  dW (C*R*R x K) = U . dZ^T     a long K = N*Ho*Wo and a small output (5 tiles at
//                                                  C=64, K=64), so it is split-K into slices that
//                                                  `sum_slices` adds into dW, laid out as Wt;
//           data    dU (N*Ho*Wo x C*R*R) = dZ^T . Wt, then col2im adds each column back into dX
//                   (a gather, one thread per input element: no atomics).
// Source: seed 004's unrolled convolution, run backwards; split-K as in CUTLASS.
// Params: the tile of ladder step 8 (common/tf32x3_params.cuh).
#include "common/tf32x3.cuh"
#include "conv/conv_common.cuh"
#include "common/tf32x3_params.cuh"

template <bool A_KCONTIG, bool B_KCONTIG>
using Block = Tf32x3Block<BM, BN, BK, WM, WN, A_KCONTIG, B_KCONTIG>;
#define THREADS (Block<false, false>::THREADS)

// dY (N, K, Ho*Wo) -> dZ (K, N, Ho*Wo): step 4's to_nchw, backwards.
extern "C" __global__ void from_nchw(ConvDims d, const float* __restrict__ dY, float* __restrict__ dZ) {
    const long long hw = (long long)d.Ho * d.Wo, total = (long long)d.N * d.K * hw;
    for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < total;
         t += (long long)gridDim.x * blockDim.x) {
        const long long pix = t % hw, k = (t / hw) % d.K, n = t / (hw * d.K);
        dZ[(k * d.N + n) * hw + pix] = dY[t];
    }
}

// Slice z of dW^T-as-stored: G (M = C*R*R, N = K), k over this slice's columns of U and dZ.
extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
filter_grad(int M, int N, int K, const float* __restrict__ U, const float* __restrict__ dZ, float* __restrict__ G,
            int k_per_slice) {
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const int k_begin = blockIdx.z * k_per_slice, k_end = min(K, k_begin + k_per_slice);
    float* out = G + (size_t)blockIdx.z * M * N;
    Block<true, true> blk;  // U (row crr, column j) at U[crr*K + j]; dZ (row k, column j) at dZ[k*K + j]
    blk.run(U, K, dZ, K, M, N, k_begin, k_end, m0, n0);
    blk.for_each_output(M, N, m0, n0, [&](int m, int n, float g) { out[(size_t)n * M + m] = g; });
}

// dW[k, crr] = sum of the slices.
extern "C" __global__ void sum_slices(const float* __restrict__ G, int count, int slices, float* __restrict__ dW) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) {
        float g = 0.0f;
        for (int s = 0; s < slices; ++s) g += G[(size_t)s * count + i];
        dW[i] = g;
    }
}

// dU (M = N*Ho*Wo, N = C*R*R, K = K) = dZ^T . Wt, stored like U: dU[crr * M + j].
extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
data_grad(int M, int N, int K, const float* __restrict__ dZ, const float* __restrict__ Wt, float* __restrict__ dU) {
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    Block<false, false> blk;  // dZ (row j, k) at dZ[k*M + j]; Wt (row crr, k) at Wt[k*N + crr]
    blk.run(dZ, M, Wt, N, M, N, 0, K, m0, n0);
    blk.for_each_output(M, N, m0, n0, [&](int m, int n, float g) { dU[(size_t)n * M + m] = g; });
}

// dX[n, c, h, w] = the sum of the dU entries that unrolled x[n, c, h, w].
extern "C" __global__ void col2im(ConvDims d, const float* __restrict__ dU, float* __restrict__ dX) {
    const long long cols = (long long)d.N * d.Ho * d.Wo, total = (long long)d.N * d.C * d.H * d.W;
    for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < total;
         t += (long long)gridDim.x * blockDim.x) {
        int n, c, h, w;
        nchw(t, d.C, d.H, d.W, n, c, h, w);
        const float g = gather_taps(d, h, w, [&](int p, int q, int ho, int wo) {
            return dU[(size_t)((c * d.R + p) * d.R + q) * cols + ((long long)n * d.Ho + ho) * d.Wo + wo];
        });
        dX[t] = g;
    }
}
