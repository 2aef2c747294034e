"""The timer and the verifier that every suite uses; no suite writes its own timing loop.

Timer (after nvbench's "cold"/"hot" measurements):
- a warm-up launch first, so module load and first-touch costs stay out of the numbers;
- each sample times `reps` back-to-back launches between two CUDA events (reps = 1 with --cold,
  where L2 is flushed before every sample by overwriting a buffer allocated once);
- hot samples are queued in batches of up to 10 behind a blocking kernel (nvbench's technique):
  the GPU runs them back to back, so neither host launch latency nor the host's own work between
  samples is timed or leaves the GPU idle; the stop rule is checked after each batch;
- samples repeat until the relative noise is at most `max_noise` (after `min_samples`), or the
  time budget is spent; the median and IQR are reported;
- noise is a robust relative spread: IQR / 1.349 / median, which equals the relative standard
  deviation for normally distributed samples but is not moved by a few outliers (a context
  switch, a clock step);
- the SM clock is read after the samples, while the GPU is still warm;
- each result names its timing method (TIMING): a row whose launches synchronize inside (the
  blocking kernel timed out on them) was timed host-issued, and says so.

Verifier: ||out - ref|| / ||ref|| in float64, with NaN or inf anywhere counted as an infinite error.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

ROBUST_SIGMA = 1.349  # IQR of a standard normal distribution
# The limit for a row computed in TF32 (one product on the tensor cores: cuBLAS and cuDNN with TF32 on,
# step 9's TF32 row): both operands rounded to 11 significant bits (unit roundoff 2^-11 each), so a
# product is off by up to 2^-10 = 9.8e-4, randomly signed; the norm-wise error lands near 3e-4 (measured
# on the H100, docs/RESULTS.md). The limit is 2^-10 doubled, for the accumulation's truncation.
TF32_RTOL = 2.0e-3
MAX_QUEUED = 512  # launches the CUDA backend queues behind its blocking kernel at once
MAX_REPS = MAX_QUEUED - 2  # launches per hot sample
BATCH = 10  # hot samples per blocking kernel

# How a result's samples were timed, for the `timing` column:
HOT_BATCHED = "hot-batched"  # queued behind the blocking kernel, several samples per release
HOT_SINGLE = "hot-single"  # behind the blocking kernel, one sample per release (a long launch)
HOST_ISSUED = "host-issued"  # each sample issued by the host as it goes: the blocking kernel timed out
COLD = "cold"  # one launch per sample after an L2 flush, host-issued
HOST = "host"  # the CPU backend: wall-clock time of the call
TIMING = (HOT_BATCHED, HOT_SINGLE, HOST_ISSUED, COLD, HOST)


@dataclass(frozen=True)
class TimingSettings:
    budget_s: float = 0.5
    min_samples: int = 10
    max_noise: float = 0.01
    cold: bool = False
    max_samples: int = 100_000
    min_sample_ms: float = 0.05  # hot mode batches launches so one sample spans at least this
    # Each sample issued by the host as it goes, never queued behind the blocking kernel: for a launch
    # whose cost is the host's own work (a PyTorch eager step, ~400 kernels issued from Python), which
    # a queued sample would hide. Same warm-up, rate estimate and stopping rule.
    host_issued: bool = False


@dataclass
class Stats:
    median_ms: float
    iqr_ms: float
    q1_ms: float
    q3_ms: float
    min_ms: float
    mean_ms: float
    samples: int
    noise: float  # robust relative spread, see module docstring
    reps: int = 1  # launches per sample
    converged: bool = True  # noise reached max_noise before the budget ran out
    sm_clock_mhz: float | None = None
    gpu_ms: float = 0.0  # every event-timed millisecond of the kernel, warm-up included
    timing: str | None = None  # one of TIMING

    def as_record(self) -> dict:
        return dict(median_ms=self.median_ms, iqr_ms=self.iqr_ms, q1_ms=self.q1_ms, q3_ms=self.q3_ms,
                    min_ms=self.min_ms, mean_ms=self.mean_ms, samples=self.samples, reps=self.reps,
                    noise=self.noise, converged=self.converged, sm_clock_mhz=self.sm_clock_mhz, gpu_ms=self.gpu_ms,
                    timing=self.timing)

    @property
    def iqr_pct(self) -> float:
        return 100 * self.iqr_ms / self.median_ms if self.median_ms > 0 else math.nan


def summarize(samples_ms: list[float] | np.ndarray) -> Stats:
    x = np.asarray(samples_ms, dtype=np.float64)
    if x.size == 0:
        raise ValueError("no samples")
    q1, med, q3 = np.percentile(x, [25, 50, 75])
    noise = (q3 - q1) / ROBUST_SIGMA / med if med > 0 else math.inf
    return Stats(float(med), float(q3 - q1), float(q1), float(q3), float(x.min()), float(x.mean()),
                 int(x.size), float(noise))


def measure(backend, launch, settings: TimingSettings = TimingSettings()) -> Stats:
    """Time `launch` (a no-argument callable that enqueues one kernel) on `backend`."""
    gpu_ms = backend.timed(launch, 1)  # warm-up
    reps = 1
    if not settings.cold:
        est = backend.timed(launch, 1)
        gpu_ms += est
        reps = max(1, min(MAX_REPS, math.ceil(settings.min_sample_ms / max(est, 1e-6))))
    # Hot samples go in batches queued behind one blocking kernel; a cold sample stands alone,
    # since the L2 flush between samples is host-issued.
    batch = 1 if settings.cold or settings.host_issued else max(1, min(BATCH, MAX_QUEUED // (reps + 2)))
    samples: list[float] = []
    t_end = time.perf_counter() + settings.budget_s
    converged = False
    while len(samples) < settings.max_samples:
        if settings.cold:
            backend.flush_l2()
        if settings.host_issued:
            samples.append(backend.timed(launch, reps))
        else:
            samples += backend.timed_samples(launch, reps, min(batch, settings.max_samples - len(samples)))
        if len(samples) >= settings.min_samples:
            if summarize(samples).noise <= settings.max_noise:
                converged = True
                break
            if time.perf_counter() >= t_end:
                break
    stats = summarize(samples)
    stats.reps, stats.converged = reps, converged
    stats.gpu_ms = gpu_ms + reps * float(np.sum(samples))
    stats.sm_clock_mhz = backend.sm_clock_mhz()
    stats.timing = timing_method(backend, launch, settings.cold, batch, settings.host_issued)
    return stats


def timing_method(backend, launch, cold: bool, batch: int, host_issued: bool = False) -> str:
    """How `measure` timed `launch`: asked of the backend after the samples, since the fallback to
    host-issued launches happens inside it, on the first batch whose blocking kernel times out."""
    if backend.name == "cpu":
        return HOST
    if host_issued or backend.issued_by_host(launch):
        return HOST_ISSUED
    if cold:
        return COLD
    return HOT_BATCHED if batch > 1 else HOT_SINGLE


def rel_err(out: np.ndarray, ref: np.ndarray) -> float:
    """||out - ref|| / ||ref|| (Frobenius), in float64; any NaN or inf in `out` gives inf."""
    out64 = np.asarray(out, dtype=np.float64)
    if not np.all(np.isfinite(out64)):
        return math.inf
    ref64 = np.asarray(ref, dtype=np.float64)
    return rel_err_from_sums(float(np.sum((out64 - ref64) ** 2)), float(np.sum(ref64 ** 2)))


def rel_err_from_sums(err_sq: float, ref_sq: float) -> float:
    """The same ratio from sum((out-ref)^2) and sum(ref^2), as the GPU verifier returns them."""
    if not math.isfinite(err_sq):
        return math.inf
    return math.sqrt(err_sq / ref_sq) if ref_sq > 0 else math.sqrt(err_sq)
