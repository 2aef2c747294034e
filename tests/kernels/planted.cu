// Planted failures for the sweep's survival tests (tests/test_gpu_sweep.py), with the GEMM
// signature so the GEMM session launches them like any ladder step.
//   MODE 1: writes 4 TiB past C -> cudaErrorIllegalAddress, a sticky error that poisons the context
//   MODE 2: spins on A[0], which holds a non-zero float and never changes -> a hang for the watchdog
extern "C" __global__ void gemm(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
                                float* C) {
#if MODE == 1
    C[(unsigned long long)1 << 40] = alpha;
#elif MODE == 2
    const volatile float* spin = A;
    while (spin[0] != 0.0f) {
    }
#endif
}
