"""The NumPy backend: the same seam as the CUDA one, so tables and CSV work on any machine."""

from __future__ import annotations

import os
import platform
import time

import numpy as np

from nnbench import measure
from nnbench.runtime.backend import HOST_CLOCK, Backend


class CpuBackend(Backend):
    name = "cpu"
    runs_kernels = False  # the NumPy variants run instead; load, launch and graphs say so in one line
    has_vendor_libs = False
    clock_name = HOST_CLOCK
    device = None  # no DeviceInfo: no GPU peaks, no occupancy
    arch = None

    def __init__(self) -> None:
        self._flush: np.ndarray | None = None

    def alloc(self, nbytes: int) -> np.ndarray:
        return np.empty(nbytes, dtype=np.uint8)

    def upload(self, host: np.ndarray) -> np.ndarray:
        return np.array(host, copy=True, order="K")

    def write(self, buf: np.ndarray, host: np.ndarray) -> None:
        buf[...] = host

    def copy(self, dst: np.ndarray, src: np.ndarray, nbytes: int = 0) -> None:
        np.copyto(dst, src)

    def fill_nan(self, buf: np.ndarray, count: int = 0) -> None:
        buf.fill(np.nan)

    def download(self, buf: np.ndarray, like: np.ndarray | None = None) -> np.ndarray:
        return np.array(buf, copy=True, order="K")

    def rel_err(self, out: np.ndarray, ref: np.ndarray, count: int = 0) -> float:
        return measure.rel_err(out, ref)

    def conditioned_error(self, out: np.ndarray, ref: np.ndarray, magnitude: np.ndarray, count: int = 0) -> float:
        return measure.conditioned_error(out, ref, magnitude)

    def synchronize(self) -> None:
        pass

    def timed(self, fn, reps: int, during=None) -> float:
        """Milliseconds per call over `reps` back-to-back calls (no NVML here: `during` is never given)."""
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - t0) * 1e3 / reps

    def timed_samples(self, fn, reps: int, count: int, during=None, collective: bool = False) -> list[float]:
        return [self.timed(fn, reps) for _ in range(count)]

    def flush_l2(self) -> None:
        # Touching a buffer well past the last-level cache evicts the operands, as the GPU flush does.
        if self._flush is None:
            self._flush = np.empty(64 << 20, dtype=np.uint8)
        self._flush.fill(1)

    def sm_clock_mhz(self) -> float | None:
        return None

    def telemetry(self):
        """No clocks, power or energy on the CPU path: those columns stay empty."""
        return None

    def environment(self) -> dict:
        return {"backend": "cpu", "gpu": "cpu", "cc": "", "sms": os.cpu_count(), "driver": "",
                "cuda": "", "device_name": cpu_model(),
                "max_sm_clock_mhz": None, "fp32_peak_tflops": None, "tf32_peak_tflops": None,
                "dram_peak_gbs": None}


def cpu_model() -> str:
    """The processor's marketing name from /proc/cpuinfo (Linux), else the architecture (x86_64)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return platform.machine() or platform.processor() or "unknown CPU"
