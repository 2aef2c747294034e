// Step 8: split-precision tensor cores (3xTF32), fp32-level accuracy.
//
// Idea:   the FFMA ladder tops out under cuBLAS because H100's FP32 pipe is the ceiling (66.9
//         TFLOP/s) and a SIMT kernel spends issue slots on shared loads. The tensor cores run TF32
//         at ~8x that rate but round operands to 10 mantissa bits (rel. error ~3e-4, which our
//         verifier rejects). Splitting each operand x = big + small, with big = tf32(x) and
//         small = tf32(x - big), and summing small*big + big*small + big*big (small*small is below
//         fp32 rounding) recovers about fp32 accuracy with 3 tensor-core products instead of 1.
//         The result is a float32 GEMM that passes the same rtol as the FFMA steps; it is not
//         bit-identical to sgemm, and it is reported as its own step, never as "FP32 FFMA".
// Source: the 3xTF32 technique of CUTLASS (examples/27_ampere_3xtf32_fast_accurate_tensorop_gemm)
//         and Ootomo & Yokota (2022); PTX ISA mma.sync.m16n8k8 fragment layouts.
// Params: BM, BN in {64, 128}: block tile; BK in {8, 16}; WM (multiple of 16), WN (multiple of
//         8): warp tile. MIN_BLOCKS in {1, 2}: resident blocks per SM asked of the register
//         allocator. Threads = 32*(BM/WM)*(BN/WN). Defaults BM=128 BN=64 WM=32 WN=64 (4 warps, each
//         32x64) won the configs/gemm_sweep.yaml sweep at 4096^3 on the H100 (docs/RESULTS.md).
//         Two shared stages as in step 7; the mainloop lives in common/tf32x3.cuh, which the
//         batched MLP trainer (kernels_cu/mlp/06_batched.cu) runs too.
// Sizes:  any M, N, K >= 1 (zero-filled edges; float4 loads where the leading dimension allows).
// Launch: 1-D blocks of THREADS; grid (ceil(M/BM), ceil(N/BN)). Needs sm_80 or later.
#include "common/tf32x3.cuh"

#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 64
#endif
#ifndef BK
#define BK 16
#endif
#ifndef WM
#define WM 32
#endif
#ifndef WN
#define WN 64
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 1
#endif
using Block = Tf32x3Block<BM, BN, BK, WM, WN, false, true>;

extern "C" __global__ void __launch_bounds__(Block::THREADS, MIN_BLOCKS)
gemm(int M, int N, int K, float alpha, const float* __restrict__ A, const float* __restrict__ B,
     float beta, float* __restrict__ C) {
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    Block blk;
    blk.run(A, M, B, K, M, N, 0, K, m0, n0);
    // Two loops rather than gemm_epilogue's test per element: at one resident block per SM the
    // epilogue does not overlap another block's mainloop, and the per-element branch cost 1.5% at
    // 4096^3 (measured against the loop-unswitched form the compiler made of the earlier code).
    if (beta == 0.0f)
        blk.for_each_output(M, N, m0, n0, [&](int gm, int gn, float v) { C[(size_t)gn * M + gm] = alpha * v; });
    else
        blk.for_each_output(M, N, m0, n0, [&](int gm, int gn, float v) {
            float* c = &C[(size_t)gn * M + gm];
            *c = alpha * v + beta * *c;
        });
}
