// The hierarchical block / warp / thread tile (CME 213 tutorial, seed 002), as a reusable piece:
// steps 6 and 7 differ only in how tiles reach shared memory, not in how a warp computes on them.
//
//   block tile BM x BN      -> (BM/WM) x (BN/WN) warps
//   warp tile  WM x WN      -> WMITER x WNITER sub-tiles of WSUBM x WSUBN, visited in turn
//   sub-tile   WSUBM x WSUBN-> 32 lanes as (WSUBM/TM) x (WSUBN/TN), each holding TM x TN of C
//
// Warps in the same row of the block read the same piece of As, warps in the same column the same
// piece of Bs (the tutorial's "data sharing"); accumulators stay in registers for the whole K loop.
// Inside a sub-tile a lane's TM rows are float4 groups strided by 4*(WSUBM/TM), so the 8 lanes of
// an LDS.128 phase read 128 contiguous bytes: no bank conflicts, no padding needed for As.
#pragma once
#include "common/gemm_tiles.cuh"

template <int kBM, int kBN, int kBK, int kWM, int kWN, int kWNITER, int kTM, int kTN>
struct WarpTile {
    static constexpr int WMITER = (kWM * kWN) / (32 * kTM * kTN * kWNITER);
    static constexpr int WSUBM = kWM / WMITER, WSUBN = kWN / kWNITER;
    static constexpr int TPM = WSUBM / kTM, TPN = WSUBN / kTN;  // lanes along m and n
    static_assert(WMITER >= 1 && WMITER * 32 * kTM * kTN * kWNITER == kWM * kWN, "warp tile must split into whole lanes");
    static_assert(TPM * TPN == 32, "a sub-tile must hold exactly one warp");
    static_assert(kTM % 4 == 0 && kTN % 4 == 0, "thread tile must be whole float4s");

    float acc[WMITER][kWNITER][kTM][kTN];
    int wm0, wn0, lm, ln;  // warp origin in the block tile; lane's first row and column

    __device__ __forceinline__ void init(int tid) {
        const int warp = tid / 32, lane = tid % 32;
        wm0 = (warp % (kBM / kWM)) * kWM;
        wn0 = (warp / (kBM / kWM)) * kWN;
        lm = (lane % TPM) * 4;
        ln = (lane / TPM) * 4;
#pragma unroll
        for (int a = 0; a < WMITER; ++a)
#pragma unroll
            for (int b = 0; b < kWNITER; ++b)
#pragma unroll
                for (int i = 0; i < kTM; ++i)
#pragma unroll
                    for (int j = 0; j < kTN; ++j) acc[a][b][i][j] = 0.0f;
    }

    // Row index inside the block tile of element i of sub-tile a (and likewise for columns).
    __device__ __forceinline__ int row(int a, int i) const { return wm0 + a * WSUBM + lm + (i / 4) * TPM * 4 + (i % 4); }
    __device__ __forceinline__ int col(int b, int j) const { return wn0 + b * WSUBN + ln + (j / 4) * TPN * 4 + (j % 4); }

    __device__ __forceinline__ void compute(const float (*As)[kBM], const float (*Bs)[kBN + BS_PAD]) {
        float a[WMITER][kTM], b[kWNITER][kTN];
#pragma unroll
        for (int k = 0; k < kBK; ++k) {
#pragma unroll
            for (int s = 0; s < WMITER; ++s)
#pragma unroll
                for (int g = 0; g < kTM / 4; ++g)
                    *reinterpret_cast<float4*>(&a[s][4 * g]) = *reinterpret_cast<const float4*>(&As[k][row(s, 4 * g)]);
#pragma unroll
            for (int s = 0; s < kWNITER; ++s)
#pragma unroll
                for (int g = 0; g < kTN / 4; ++g)
                    *reinterpret_cast<float4*>(&b[s][4 * g]) = *reinterpret_cast<const float4*>(&Bs[k][col(s, 4 * g)]);
#pragma unroll
            for (int sa = 0; sa < WMITER; ++sa)
#pragma unroll
                for (int sb = 0; sb < kWNITER; ++sb)
#pragma unroll
                    for (int i = 0; i < kTM; ++i)
#pragma unroll
                        for (int j = 0; j < kTN; ++j) acc[sa][sb][i][j] += a[sa][i] * b[sb][j];
        }
    }

    __device__ __forceinline__ void store(float* __restrict__ C, int M, int N, int m0, int n0, float alpha,
                                          float beta) const {
        const bool vec = ld_is_vec4(M);
#pragma unroll
        for (int sa = 0; sa < WMITER; ++sa)
#pragma unroll
            for (int sb = 0; sb < kWNITER; ++sb)
#pragma unroll
                for (int j = 0; j < kTN; ++j) {
                    const int gn = n0 + col(sb, j);
                    if (gn >= N) continue;
#pragma unroll
                    for (int g = 0; g < kTM / 4; ++g) {
                        const float4 v = make_float4(acc[sa][sb][4 * g][j], acc[sa][sb][4 * g + 1][j],
                                                     acc[sa][sb][4 * g + 2][j], acc[sa][sb][4 * g + 3][j]);
                        store4_epilogue(C + (size_t)gn * M, m0 + row(sa, 4 * g), M, vec, v, alpha, beta);
                    }
                }
    }
};

// The parameter block shared by the warp-tiled steps, with the defaults they ship with.
#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 16
#endif
#ifndef WM
#define WM 64
#endif
#ifndef WN
#define WN 32
#endif
#ifndef WNITER
#define WNITER 2
#endif
#ifndef TM
#define TM 8
#endif
#ifndef TN
#define TN 4
#endif
#define THREADS (32 * (BM / WM) * (BN / WN))
