// The 3xTF32 pieces of ladder step 8 (kernels_cu/gemm/08_tf32x3.cu says why it is built this
// way): the split and the MMA, used by step 8 itself, and its block mainloop generalised to either
// operand layout for the batched MLP trainer's GEMMs (kernels_cu/mlp/10_batched.cu). Step 8 keeps
// its own copy of the loop, which measured 1.8% faster there (its header says why).
//
// A block computes the BLOCK_M x BLOCK_N tile at (m0, n0) of op(A) . op(B) over k in [k_begin, k_end), in
// registers: acc[MI][NI][4] per thread, in the mma.sync m16n8k8 accumulator layout. The caller
// applies its epilogue with for_each_output. A_KCONTIG / B_KCONTIG give each operand's layout
// (common/gemm_tiles.cuh): the ladder is (false, true); a transposed operand flips its flag.
#pragma once
#include "common/gemm_tiles.cuh"

// Template parameters are spelled out (BLOCK_M, not BM): the including kernels get BM etc. as -D macros.
#define TF32X3_SPAD 8  // rows padded by 8 floats: the fragment loads (lane -> row t, column g) hit 32 banks

__device__ __forceinline__ unsigned to_tf32(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

// x -> (big, small), both TF32 bit patterns, with x ~= big + small to ~fp32 precision.
__device__ __forceinline__ void split(float x, unsigned& big, unsigned& small) {
    big = to_tf32(x);
    small = to_tf32(x - __uint_as_float(big));
}

__device__ __forceinline__ void mma_tf32(float (&c)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <int BLOCK_M, int BLOCK_N, int BLOCK_K, int WARP_M, int WARP_N, bool A_KCONTIG, bool B_KCONTIG>
struct Tf32x3Block {
    static_assert(WARP_M % 16 == 0 && WARP_N % 8 == 0 && BLOCK_K % 8 == 0, "warp tile must be whole m16n8k8 tiles");
    static constexpr int THREADS = 32 * (BLOCK_M / WARP_M) * (BLOCK_N / WARP_N);
    static constexpr int MI = WARP_M / 16;  // m16 tiles per warp
    static constexpr int NI = WARP_N / 8;   // n8 tiles per warp

    float acc[MI][NI][4];
    int wm0, wn0, g, t;

    // M x K operand A at lda, K x N operand B at ldb (each as its flag says).
    __device__ __forceinline__ void run(const float* __restrict__ A, int lda, const float* __restrict__ B, int ldb,
                                        int M, int N, int k_begin, int k_end, int m0, int n0) {
        const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
        g = lane / 4;  // PTX "groupID" and "threadID_in_group"
        t = lane % 4;
        wm0 = (warp % (BLOCK_M / WARP_M)) * WARP_M;
        wn0 = (warp / (BLOCK_M / WARP_M)) * WARP_N;
        const bool vecA = ld_is_vec4(lda), vecB = ld_is_vec4(ldb);

        __shared__ __align__(16) float As[2][BLOCK_K][BLOCK_M + TF32X3_SPAD];
        __shared__ __align__(16) float Bs[2][BLOCK_K][BLOCK_N + TF32X3_SPAD];
        Tile<BLOCK_M, BLOCK_K, THREADS, TF32X3_SPAD, A_KCONTIG> ta;
        Tile<BLOCK_N, BLOCK_K, THREADS, TF32X3_SPAD, B_KCONTIG> tb;

#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < NI; ++j)
#pragma unroll
                for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.0f;

        ta.fetch(A, lda, M, k_end, m0, k_begin, tid, vecA);
        tb.fetch(B, ldb, N, k_end, n0, k_begin, tid, vecB);
        ta.stash(As[0], tid);
        tb.stash(Bs[0], tid);
        __syncthreads();

        int stage = 0;
        for (int k0 = k_begin; k0 < k_end; k0 += BLOCK_K) {
            const bool more = k0 + BLOCK_K < k_end;
            if (more) {
                ta.fetch(A, lda, M, k_end, m0, k0 + BLOCK_K, tid, vecA);
                tb.fetch(B, ldb, N, k_end, n0, k0 + BLOCK_K, tid, vecB);
            }
#pragma unroll
            for (int kk = 0; kk < BLOCK_K; kk += 8) {
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
                    const int n = wn0 + j * 8 + g;  // B fragment: b0 (k=t, n=g) b1 (k=t+4, n=g)
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
    }

    // f(m, n, value) for each of this thread's outputs inside M x N (block offsets m0, n0).
    // Accumulator fragment: c0 (g, 2t) c1 (g, 2t+1) c2 (g+8, 2t) c3 (g+8, 2t+1).
    template <class F>
    __device__ __forceinline__ void for_each_output(int M, int N, int m0, int n0, F f) const {
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < NI; ++j)
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    const int gm = m0 + wm0 + i * 16 + g + (r / 2) * 8;
                    const int gn = n0 + wn0 + j * 8 + 2 * t + (r % 2);
                    if (gm < M && gn < N) f(gm, gn, acc[i][j][r]);
                }
    }
};
