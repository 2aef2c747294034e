"""Measured device ceilings: the FP32 FMA rate, device-to-device copy bandwidth, and the latency of
one exchange between SMs and of a grid barrier, with our own kernels (kernels_cu/common/ceilings.cu),
for `nnbench devices --measure`, the roofline, and the persistent trainers' phase floor."""

from __future__ import annotations

import numpy as np

from nnbench import measure, paths
from nnbench.errors import KernelFault
from nnbench.runtime.compile import CompileRequest, compile_cubin

CHAINS, UNROLL = 8, 16  # must match ceilings.cu
FMA_ITERS = 4096
FMA_THREADS = 256
COPY_BYTES = 1 << 30  # far past any L2, so the copy streams from DRAM
ROUNDS = 2000  # handoffs and barriers per launch: launch overhead is < 1% of it
SPIN_TIMEOUT_NS = 1_000_000_000  # a partner block's wait: a whole launch takes a few ms


def gave_up(backend, status, what: str, timeout_ns: int = SPIN_TIMEOUT_NS) -> None:
    """Raise if a waiting kernel gave up on a partner block (its *status set, common/patience.cuh)."""
    backend.synchronize()
    if int(backend.download(status, np.zeros(1, np.int32))[0]) != 0:
        raise KernelFault(f"{what}: a block waited more than {timeout_ns / 1e9:g} s for a partner block that "
                          "never arrived, and the kernel gave up")


def measure_ceilings(backend, settings: measure.TimingSettings = measure.TimingSettings()) -> dict:
    dev = backend.device
    comp = compile_cubin(CompileRequest.make(paths.KERNELS / "common/ceilings.cu", {"CHAINS": CHAINS}, backend.arch))

    fma = backend.load(comp, "fma_peak")
    occ = backend.occupancy(fma, FMA_THREADS)
    blocks = dev.sm_count * occ.blocks_per_sm
    out = backend.upload(np.zeros(blocks * FMA_THREADS, dtype=np.float32))
    launch = backend.bind(fma, (blocks, 1, 1), (FMA_THREADS, 1, 1),
                          (backend.ptr(out), np.int32(FMA_ITERS), np.float32(0.999), np.float32(1e-3)), "Piff")
    st = measure.measure(backend, launch, settings)
    flops = 2.0 * CHAINS * UNROLL * FMA_ITERS * blocks * FMA_THREADS
    fma_tflops = flops / (st.median_ms * 1e-3) / 1e12

    cp = backend.load(comp, "copy_bw")
    n4 = COPY_BYTES // 16
    src = backend.upload(np.ones(COPY_BYTES // 4, dtype=np.float32))
    dst = backend.upload(np.zeros(COPY_BYTES // 4, dtype=np.float32))
    launch = backend.bind(cp, (dev.sm_count * 8, 1, 1), (512, 1, 1),
                          (backend.ptr(src), backend.ptr(dst), np.int64(n4)), "PPq")
    st2 = measure.measure(backend, launch, settings)
    copy_gbs = 2.0 * COPY_BYTES / (st2.median_ms * 1e-3) / 1e9

    status = backend.upload(np.zeros(1, dtype=np.int32))
    spin = (backend.ptr(status), np.int64(SPIN_TIMEOUT_NS))
    handoff = backend.load(comp, "handoff")
    box = backend.upload(np.zeros(1, dtype=np.uint64))
    launch = backend.bind(handoff, (2, 1, 1), (32, 1, 1), (backend.ptr(box), np.int32(ROUNDS), *spin), "PiPq")
    handoff_us = measure.measure(backend, launch, settings).median_ms * 1e3 / (2 * ROUNDS)
    gave_up(backend, status, "handoff")

    barrier = backend.load(comp, "grid_barrier")
    count = backend.upload(np.zeros(1, dtype=np.uint32))

    launch = backend.bind(barrier, (dev.sm_count, 1, 1), (128, 1, 1), (backend.ptr(count), np.int32(ROUNDS), *spin),
                          "PiPq")

    def barriers():  # the count must start at 0 each launch; the write is outside the kernel's time
        backend.write(count, np.zeros(1, dtype=np.uint32))
        return backend.timed(launch, 1)
    barrier_us = float(np.median([barriers() for _ in range(5)])) * 1e3 / ROUNDS
    gave_up(backend, status, "grid_barrier")
    return {
        "fma_tflops": fma_tflops, "fma_pct_theory": 100 * fma_tflops * 1e12 / dev.fp32_peak_flops,
        "fma_sm_clock_mhz": st.sm_clock_mhz,
        "copy_gbs": copy_gbs, "copy_pct_theory": 100 * copy_gbs * 1e9 / dev.dram_peak_bytes,
        "handoff_us": handoff_us, "grid_barrier_us": barrier_us,
    }
