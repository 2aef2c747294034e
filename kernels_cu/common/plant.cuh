// A planted slowdown, compiled in only when asked for (NNBENCH_PLANT="PLANT_SLOWDOWN=N" in the environment:
// nnbench/runtime/compile.py adds it to every compile and to the cache key). It is the proof that the
// regression gate catches a kernel that does more work, and unlike the test-only defects (tests/mutants.py,
// patched into a copy of the tree for one process) it stays here because the gate's figures in the README,
// docs/gate.md and docs/RESULTS.md are reproduced with the shipped commands (`nnbench check --run`), whose
// sweep workers are other processes that only the environment reaches. With PLANT_SLOWDOWN = 0 (the
// default) the code compiles to nothing.
#pragma once

#ifndef PLANT_SLOWDOWN
#define PLANT_SLOWDOWN 0
#endif

// The calling thread spins for PLANT_SLOWDOWN x 128 SM cycles (about 64 ns each at 2 GHz): work that lands
// on the critical path of whatever phase calls it, and grows smoothly with N (faster than N once the spin
// outlasts the work it hides behind: +1.2% at N = 128, +4.0% at 256, +13% at 512 on the H100's direct
// convolution; calibrate in the run, as lab/scripts/measurement_targets.py does). (__nanosleep, used before,
// sleeps in power-of-two steps on the H100: N = 192 and 255 slowed the direct convolution by 1.4%, N = 256
// by 3.8%, so no N gave 3%; lab/journal/measurement.md.)
__device__ __forceinline__ void plant_slowdown() {
#if PLANT_SLOWDOWN > 0
    const long long until = clock64() + 128LL * PLANT_SLOWDOWN;
    while (clock64() < until) {
    }
#endif
}
