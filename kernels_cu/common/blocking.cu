// Holds the stream while the host queues a timed sample, after nvbench's blocking kernel.
//
// Without it, a sample is: record start, launch (the GPU idles until the launch arrives, ~5 us
// from Python, more when the CPU is busy), record end; the idle gap is counted as kernel time and
// varies from run to run. With it, the start event, every launch and the end event are all queued
// behind this kernel, and the host releases it by writing 1 to a mapped flag: the GPU then runs
// them back to back, so a sample holds kernel time and nothing else.
//
// A safety timeout (globaltimer, nanoseconds) lets the stream go if the flag never comes: a launch
// that synchronizes inside (cuBLAS's first call for a shape does) would otherwise wait on this
// kernel forever. On a timeout the kernel writes 2 to the flag, the host throws the samples away
// and measures that launch without blocking from then on (nvbench does the same).
extern "C" __global__ void block_stream(volatile int* flag, unsigned long long timeout_ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        if (*flag != 0) return;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < timeout_ns);
    *flag = 2;
}
