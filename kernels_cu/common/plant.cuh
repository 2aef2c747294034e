// Planted defects, compiled in only when a test asks for them (NNBENCH_PLANT="PLANT_SLOWDOWN=N" in the
// environment: nnbench/runtime/compile.py adds it to every compile and to the cache key). They are the
// proof that the regression gate catches a kernel that does more work; nothing else sets them, and with
// PLANT_SLOWDOWN = 0 (the default) the code compiles to nothing.
#pragma once

#ifndef PLANT_SLOWDOWN
#define PLANT_SLOWDOWN 0
#endif

// The calling thread sleeps about PLANT_SLOWDOWN x 64 ns: work that lands on the critical path of
// whatever phase calls it.
__device__ __forceinline__ void plant_slowdown() {
#if PLANT_SLOWDOWN > 0
    __nanosleep(64u * PLANT_SLOWDOWN);
#endif
}
