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

// A wrong backward pass for the mini-batch trainers' check (tests and docs show it failing): the slope
// h(1 - h) off by a relative 2^-10, far under what a look at the outputs would notice.
#ifndef PLANT_SLOPE
#define PLANT_SLOPE 0
#endif
#define PLANTED_SLOPE(h) ((h) * (1.0f - (h)) * (PLANT_SLOPE ? 1.0f + 1.0f / 1024.0f : 1.0f))
