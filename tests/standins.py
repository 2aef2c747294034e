"""A stand-in for the CUDA backend's seam (nnbench/runtime/backend.py) over host arrays, for the CPU tests that
drive a session's GPU path: pointers are the arrays' ids, loading and occupancy always succeed, each launch is
timed at `ms`. A test's subclass gives `bind`, the 'kernel' that a launch runs."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np

from nnbench import measure


class HostArrayGpu:
    name, arch, device = "cuda", "sm_90", None
    runs_kernels, has_vendor_libs, clock_name = True, False, "CUDA events"

    def __init__(self, ms: float = 0.01, busy_ms: float = 0.0) -> None:
        self.ms, self.busy_ms = ms, busy_ms  # busy_ms: work still running when the device is synchronized
        self.buffers: dict[int, np.ndarray] = {}

    def upload(self, host):
        buf = np.array(host, copy=True)
        self.buffers[id(buf)] = buf
        return buf

    def ptr(self, buf) -> int:
        return id(buf)

    def alloc(self, nbytes: int):
        return self.upload(np.empty(max(nbytes, 4), np.uint8))

    def write(self, buf, host) -> None:
        buf[...] = host

    def fill_nan(self, buf, count: int) -> None:
        buf.reshape(-1, order="A")[:count] = np.nan  # a view of a column-major buffer too

    def conditioned_error(self, out, ref, magnitude, count: int) -> float:
        return measure.conditioned_error(out, ref, magnitude)

    def copy(self, dst, src, nbytes: int) -> None:
        dst[...] = src

    def download(self, buf, like):
        return buf.copy()

    def load(self, compiled, name: str):
        return SimpleNamespace(name=name, state={}, info=SimpleNamespace(registers=16, smem_bytes=0, local_bytes=0))

    def occupancy(self, kernel, threads: int, smem: int):
        return SimpleNamespace(occupancy=1.0, limiter="threads")

    def bind(self, kernel, grid, block, args, signature=None, *, smem=0, stream=None):
        raise NotImplementedError

    def timed(self, fn, reps: int, during=None) -> float:
        for _ in range(reps):
            fn()
        return self.ms

    def timed_samples(self, fn, reps: int, count: int, during=None) -> list[float]:
        return [self.timed(fn, reps) for _ in range(count)]

    def issued_by_host(self, launch) -> bool:
        return False

    def flush_l2(self) -> None:
        pass

    def sm_clock_mhz(self):
        return None

    def synchronize(self) -> None:
        if self.busy_ms:
            time.sleep(self.busy_ms / 1e3)
