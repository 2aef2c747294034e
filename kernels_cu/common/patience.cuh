// A spin wait that gives up, for every kernel whose blocks wait for one another (the fused MLP
// trainers, the device-ceiling probes in common/ceilings.cu): a partner block that never arrives
// (not co-resident, faulted, or a bug) ends the kernel with *status set instead of hanging the GPU.
#pragma once

__device__ __forceinline__ long long now_ns() {
    long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// A wait that gives up: after timeout_ns, or as soon as another block has given up (*status set).
// Checked every 256 spins, so the clock and status reads stay off the fast path, and out of line,
// so the many waits inlined in a trainer's loop do not each carry a copy (the loop's code is the
// SM's instruction cache's to hold).
// The start time goes in and out by value (-1: give up). A pointer to it put the waiting thread's
// Patience in local memory, so every missed poll loaded and stored its spin count there before it
// polled again (Net 8 0.6 us slower, docs/RESULTS.md, "tenth step").
__device__ __noinline__ long long patience_holds(int* status, long long timeout_ns, long long start) {
    const long long t = now_ns();
    if (start == 0) start = t;
    if (*(volatile int*)status != 0 || t - start > timeout_ns) {
        atomicCAS(status, 0, 1);
        return -1;
    }
    return start;
}

struct Patience {
    int* status;
    long long timeout_ns, start = 0;
    unsigned spin = 0;

    __device__ __forceinline__ bool still() {
        if ((++spin & 255) != 0) return true;
        start = patience_holds(status, timeout_ns, start);
        return start >= 0;
    }
};
