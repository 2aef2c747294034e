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
//         Two shared stages as in step 7, rows padded
//         by 8 floats so the fragment loads (lane -> row t, column g) hit 32 distinct banks.
//         The batched MLP trainer runs this mainloop for either operand layout through
//         common/tf32x3.cuh (Tf32x3Block). This kernel keeps its own copy of the loop: built on
//         Tf32x3Block it measured 1.8% slower at 4096^3 (2.98 against 2.93 ms on the H100, the
//         same PTX mainloop scheduled differently by ptxas; docs/RESULTS.md).
// Sizes:  any M, N, K >= 1 (zero-filled edges; float4 loads where the leading dimension allows).
// Launch: 1-D blocks of THREADS; grid (ceil(M/BM), ceil(N/BN)). Needs sm_80 or later.
#include "common/tf32x3.cuh"

#include "common/tf32x3_params.cuh"
#define THREADS (32 * (BM / WM) * (BN / WN))
#define MI (WM / 16)  // m16 tiles per warp
#define NI (WN / 8)   // n8 tiles per warp
#define SPAD TF32X3_SPAD

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
gemm(int M, int N, int K, float alpha, const float* __restrict__ A, const float* __restrict__ B,
     float beta, float* __restrict__ C) {
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int g = lane / 4, t = lane % 4;  // PTX "groupID" and "threadID_in_group"
    const int wm0 = (warp % (BM / WM)) * WM, wn0 = (warp / (BM / WM)) * WN;
    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
    const bool vecA = ld_is_vec4(M), vecB = ld_is_vec4(K);

    __shared__ __align__(16) float As[2][BK][BM + SPAD];
    __shared__ __align__(16) float Bs[2][BK][BN + SPAD];
    TileA<BM, BK, THREADS, SPAD> ta;
    TileB<BN, BK, THREADS, SPAD> tb;

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.0f;

    ta.fetch(A, M, K, m0, 0, tid, vecA);
    tb.fetch(B, N, K, n0, 0, tid, vecB);
    ta.stash(As[0], tid);
    tb.stash(Bs[0], tid);
    __syncthreads();

    int stage = 0;
    for (int k0 = 0; k0 < K; k0 += BK) {
        const bool more = k0 + BK < K;
        if (more) {
            ta.fetch(A, M, K, m0, k0 + BK, tid, vecA);
            tb.fetch(B, N, K, n0, k0 + BK, tid, vecB);
        }
#pragma unroll
        for (int kk = 0; kk < BK; kk += 8) {
            unsigned abig[MI][4], asml[MI][4], bbig[NI][2], bsml[NI][2];
#pragma unroll
            for (int i = 0; i < MI; ++i) {
                const int m = wm0 + i * 16 + g;  // A fragment: a0 (g, t) a1 (g+8, t) a2 (g, t+4) a3 (g+8, t+4)
                split(As[stage][kk + t][m], abig[i][0], asml[i][0]);
                split(As[stage][kk + t][m + 8], abig[i][1], asml[i][1]);
                split(As[stage][kk + t + 4][m], abig[i][2], asml[i][2]);
                split(As[stage][kk + t + 4][m + 8], abig[i][3], asml[i][3]);
            }
#pragma unroll
            for (int j = 0; j < NI; ++j) {
                const int n = wn0 + j * 8 + g;   // B fragment: b0 (k=t, n=g) b1 (k=t+4, n=g)
                split(Bs[stage][kk + t][n], bbig[j][0], bsml[j][0]);
                split(Bs[stage][kk + t + 4][n], bbig[j][1], bsml[j][1]);
            }
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NI; ++j) {
                    // The tensor core's fp32 accumulation truncates; over K = 4096 that bias grew
                    // to a rel. error of 2.9e-5 when the running sum lived in the MMA (measured,
                    // docs/RESULTS.md). So each k8 step's three products start from zero and are
                    // added to the running sum with a round-to-nearest FADD (Ootomo & Yokota).
                    float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                    mma_tf32(part, asml[i], bbig[j]);  // small terms first
                    mma_tf32(part, abig[i], bsml[j]);
                    mma_tf32(part, abig[i], bbig[j]);
#pragma unroll
                    for (int r = 0; r < 4; ++r) acc[i][j][r] += part[r];
                }
        }
        if (more) {
            ta.stash(As[stage ^ 1], tid);
            tb.stash(Bs[stage ^ 1], tid);
        }
        __syncthreads();
        stage ^= 1;
    }

    // Accumulator fragment: c0 (g, 2t) c1 (g, 2t+1) c2 (g+8, 2t) c3 (g+8, 2t+1).
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int gm = m0 + wm0 + i * 16 + g + (r / 2) * 8;
                const int gn = n0 + wn0 + j * 8 + 2 * t + (r % 2);
                if (gm < M && gn < N) {
                    float* c = &C[(size_t)gn * M + gm];
                    *c = gemm_epilogue(acc[i][j][r], alpha, beta, c);
                }
            }
}
