"""The timer and the verifier that every workload uses; no workload writes its own timing loop.

Timer (after nvbench's "cold"/"hot" measurements):
- a warm-up launch first, so module load and first-touch costs stay out of the numbers;
- each sample times `reps` back-to-back launches between two CUDA events (reps = 1 with --cold,
  where L2 is flushed before every sample by overwriting a buffer allocated once);
- hot samples are queued in batches of up to 10 behind a blocking kernel (nvbench's technique):
  the GPU runs them back to back, so neither host launch latency nor the host's own work between
  samples is timed or leaves the GPU idle; the stop rule is checked after each batch. A batch fits the
  driver's queue (about 1,000 entries): one that filled it (a launch that queues several kernels, at high
  reps) is void, and the launch's batches shrink to the room the backend learned (QueueFull,
  nnbench/runtime/cuda.py);
- samples repeat until the relative noise is at most `max_noise` (after `min_samples`), or the
  time budget is spent; the median and IQR are reported;
- noise is a robust relative spread: IQR / 1.349 / median, which equals the relative standard
  deviation for normally distributed samples but is not moved by a few outliers (a context
  switch, a clock step);
- NVML (nnbench/runtime/nvml.py) is read while each batch runs on the GPU, when the host would only
  wait: SM and memory clocks and the throttle reasons. A batch that ran with the SM clock under 75%
  of its maximum, or under a power or thermal limit, is dropped (nvbench's rule) and counted in
  `dropped`; `keep_throttled` keeps it. Should every batch be throttled (a GPU capped for good), the
  samples are kept and `throttle` says why, rather than reporting nothing (the gate then calls the case
  UNSTABLE: nnbench/verdict.py). Host-issued samples are probed once per BATCH samples, like a batch;
  runs that a workload times itself (PyTorch's per-sample epochs) get the same readings through RunWatch;
- host-issued samples (asked for, below, or fallen back to) stop only once they cover HOST_WINDOW_MS
  of the host's time, whatever the budget: the host's speed wanders over tenths of a second, so a
  short window reads one stretch of it (see HOST_WINDOW_MS);
- `power_w` is the GPU's power over the timed window: from the total-energy counter read before the
  first batch and after the last where the window lasts a second or more (host gaps between batches
  included), else the mean of the power read with each kept batch (nnbench/runtime/nvml.py says
  why and how), and `energy_method` says which reading it came from;
- energy is measured only where asked (`energy`, the command line's --energy): after the timed samples
  and a bounded cool-down, the case runs again and again for a window of a second or more over which
  NVML's energy counter is read (nnbench/runtime/energy.py, docs/ENERGY.md); `energy_j` is that window's
  joules per launch, `power_w` its average watts, `energy_window_ms` its length. Elsewhere `energy_j` stays
  empty and `energy_note` says why: no power reading is ever multiplied by a time;
- every kept sample is returned (`samples_ms`, each the mean over its `reps` launches), so results
  files carry them and the gate can test them (nnbench/verdict.py);
- each result names its timing method (TIMING): a row whose launches synchronize inside (the
  blocking kernel timed out on them) was timed host-issued, and says so.

Verifier: `conditioned_error`, each output's error against the magnitudes that enter it (for GEMM
|alpha|(|A||B|) + |beta||C0|, the LAPACK test ratio), the largest over the outputs, against `error_limit`,
derived from the precision and the reduction length (docs/VERIFICATION.md derives it). NaN or inf anywhere
is an infinite error. `rel_err` (||out - ref|| / ||ref||) stays for what has no magnitudes: a user's kernel.
"""

from __future__ import annotations

import gc
import math
import time
from dataclasses import dataclass, field, replace

import numpy as np

from nnbench.errors import QueueFull

ROBUST_SIGMA = 1.349  # IQR of a standard normal distribution
# The limit for a row computed in TF32 (one product on the tensor cores: cuBLAS and cuDNN with TF32 on,
# step 9's TF32 row): both operands rounded to 11 significant bits (unit roundoff 2^-11 each), so a
# product is off by up to 2^-10 = 9.8e-4, randomly signed; the norm-wise error lands near 3e-4 (measured
# on the H100, docs/RESULTS.md). The limit is 2^-10 doubled, for the accumulation's truncation.
TF32_RTOL = 2.0e-3
# Unit roundoffs for `error_limit` (docs/VERIFICATION.md). FP32 accumulation: 2^-24 with round-to-nearest; the
# tensor cores align and add an MMA's products with truncation (Fasi, Higham, Mikaitis, Pranesh 2021), whose
# unit roundoff is 2^-23. An operand taken to TF32 keeps 11 significant bits: 2^-11 rounded, 2^-10 truncated
# (the tensor cores read an FP32 register's top 19 bits); the limit takes the truncated one, so both pass.
U_FP32, U_FP32_TRUNCATED, U_TF32_OPERAND = 2.0**-24, 2.0**-23, 2.0**-10
# Higham & Mary's probabilistic bound (SIAM J. Sci. Comput. 41(5), 2019, Thm 3.1): a sum of n rounded terms
# errs by at most exp(LAMBDA sqrt(n) u + n u^2 / (1 - u)) - 1 of the sum of their magnitudes, except with
# probability 2 n exp(-LAMBDA^2 (1 - u)^2 / 2) per output. At LAMBDA = 10 that is 3.9e-22 per rounded term:
# over every term of a 4096^3 GEMM (6.9e10), 2.7e-11 for the whole problem.
LAMBDA = 10.0
# A check whose limit is measured on the problem (a trainer's, LeNet-5's step) allows this many times the error
# that float32 arithmetic itself makes there: the GPU versions measured 0.3x to 4.1x it on Nets 1-8 (the fused
# kernels' approximate sigmoid the most), so 10x passes every correct kernel and fails a 0.1% error in an update
# (lab/journal/tolerances.md).
CHECK_FACTOR = 10.0
MAX_QUEUED = 512  # launches the CUDA backend queues behind its blocking kernel at once
MAX_REPS = MAX_QUEUED - 2  # launches per hot sample
# A launch timed alone below this many sample lengths (min_sample_ms) has its per-launch time read again from a
# queued batch: a 20 us kernel's host-issued read reached 50 us now and then on the H100 (reps 1 or 4 by chance)
PROBE_BELOW = 4
BATCH = 10  # hot samples per blocking kernel
SETTLE_TRIES = 3  # batches whose device-wide wait must all look like hidden work (_last_batch)
# Host-issued samples (a PyTorch eager step) span at least this much of the host's time before the
# stopping rule may end them. Measured on the H100 (lab/journal/baselines.md): inside one 0.15 s
# window an eager Net 8 step read 3.0 to 7.0 ms, so a ~10-sample row landed anywhere from the
# independent timing's -1% to +35%; one second spans several of those stretches. A GPU-queued
# sample needs none of this: the blocking kernel takes the host out of it.
HOST_WINDOW_MS = 1000.0

# How a result's samples were timed, for the `timing` column:
HOT_BATCHED = "hot-batched"  # queued behind the blocking kernel, several samples per release
HOT_SINGLE = "hot-single"  # behind the blocking kernel, one sample per release (a long launch)
HOST_ISSUED = "host-issued"  # each sample issued by the host as it goes: the blocking kernel timed out
COLD = "cold"  # one launch per sample after an L2 flush, host-issued
HOST = "host"  # the CPU backend: wall-clock time of the call
TIMING = (HOT_BATCHED, HOT_SINGLE, HOST_ISSUED, COLD, HOST)


# The command line's --keep-throttled, for every measure call of the process, also those whose settings a
# workload fixes (the trainers' step timing).
KEEP_THROTTLED = [False]
# The command line's --energy: measured energy for every measure call whose settings leave `energy` unset.
ENERGY = [False]
ENERGY_OFF = "not measured: --energy is off"
# `nnbench soak`, for every measure call of its process, also those whose settings a workload fixes (a trainer's
# blocks and steps, PyTorch's rows, which otherwise take 10 samples over a 0.3 s budget, host-issued ones a whole
# second): one sample after the warm-up, no clock or power readings, no energy. A soak asks for verdicts; what
# makes them runs as always (the check before timing, the poisoned and checked last batch, the device-wide wait
# after it), and cold or host-issued launches stay so.
VERDICTS_ONLY = [False]
# The timing of a run that asks for verdicts alone (a soak's, a sanitized case's): one sample after the warm-up, no
# sample length to reach, no energy window.
ONE_SAMPLE = {"budget_s": 0.0, "min_samples": 1, "max_samples": 1, "min_sample_ms": 0.0, "energy": False}


def _freeze_heap() -> None:
    """Before host-issued samples: the heap collected, then frozen (TimingSettings.host_issued says why). Not
    collected in a soak (VERDICTS_ONLY), whose one sample's time nobody reads: with PyTorch loaded a collection
    took 0.2 s, 2 s of a training seed's ~6 on the H200 (cProfile of `nnbench soak --workload train`)."""
    if not VERDICTS_ONLY[0]:
        gc.collect()
    gc.freeze()


@dataclass(frozen=True)
class TimingSettings:
    budget_s: float = 0.5
    min_samples: int = 10
    max_noise: float = 0.01
    cold: bool = False
    max_samples: int = 100_000
    min_sample_ms: float = 0.05  # hot mode batches launches so one sample spans at least this
    keep_throttled: bool = False  # keep samples taken while throttled (see module docstring)
    # Each sample issued by the host as it goes, never queued behind the blocking kernel: for a launch
    # whose cost is the host's own work (a PyTorch eager step, ~400 kernels issued from Python), which
    # a queued sample would hide. Same warm-up, rate estimate and stopping rule. Python's collector is
    # frozen over the objects that exist before the samples (gc.freeze), so that the launch pays for its
    # own garbage only and not for scanning the harness's heap: measured on the H100, the same eager
    # step took 2.9 ms in a fresh process and 3.1-5.1 ms inside nnbench's before this.
    host_issued: bool = False
    # An energy window after the samples (module docstring): True, False, or None for the command line's --energy.
    # Calls that make no row (autotuning, profiling, soak draws) say False.
    energy: bool | None = None


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
    own_median_ms: float | None = None  # a data-parallel step's: this rank's median, where median_ms is the ranks' max
    samples_ms: list[float] = field(default_factory=list)  # every kept sample, ms per unit
    dropped: int = 0  # samples dropped as throttled
    # NVML over the timed window (None on the CPU backend or without NVML):
    sm_clock_min_mhz: float | None = None
    mem_clock_mhz: float | None = None
    throttle: str | None = None  # the clock-event reasons seen, e.g. "sw_power_cap"; "" for none
    clocks_locked: bool | None = None  # a user's clock setting (nvidia-smi -lgc) held the clocks
    power_w: float | None = None
    energy_j: float | None = None  # per unit
    energy_window_ms: float | None = None
    energy_method: str | None = None  # "counter", "instant power" or "average power" (nnbench/runtime/nvml.py)
    energy_window_j: float | None = None  # the energy window's joules (energy_j is per launch)
    energy_note: str | None = None  # why energy_j is empty
    # The last timed batch (nnbench/audit.py): its check's failure text, and the device-wide wait after it
    last_failure: str | None = None
    last_batch_ms: float | None = None  # between its events
    settle_ms: float | None = None

    def as_record(self) -> dict:
        return dict(median_ms=self.median_ms, iqr_ms=self.iqr_ms, q1_ms=self.q1_ms, q3_ms=self.q3_ms,
                    min_ms=self.min_ms, mean_ms=self.mean_ms, samples=self.samples, reps=self.reps,
                    noise=self.noise, converged=self.converged, sm_clock_mhz=self.sm_clock_mhz, gpu_ms=self.gpu_ms,
                    timing=self.timing, samples_ms=list(self.samples_ms), dropped=self.dropped,
                    sm_clock_min_mhz=self.sm_clock_min_mhz, mem_clock_mhz=self.mem_clock_mhz, throttle=self.throttle,
                    clocks_locked=self.clocks_locked, power_w=self.power_w, energy_j=self.energy_j,
                    energy_window_ms=self.energy_window_ms, energy_method=self.energy_method,
                    energy_window_j=self.energy_window_j, energy_note=self.energy_note)

    def per(self, units: int) -> Stats:
        """These statistics for one of `units` equal pieces of a launch (a per-sample trainer's block of
        iterations timed as one sample): every time and the energy divided, the relative spread unchanged."""
        k = 1.0 / units
        return replace(self, median_ms=self.median_ms * k, iqr_ms=self.iqr_ms * k, q1_ms=self.q1_ms * k,
                       q3_ms=self.q3_ms * k, min_ms=self.min_ms * k, mean_ms=self.mean_ms * k,
                       samples_ms=[x * k for x in self.samples_ms],
                       energy_j=None if self.energy_j is None else self.energy_j * k)

    @property
    def iqr_pct(self) -> float:
        return 100 * self.iqr_ms / self.median_ms if self.median_ms > 0 else math.nan


def relative_noise(samples_ms) -> float:
    """The module docstring's robust relative spread, without building a Stats (checked after every batch)."""
    q1, med, q3 = np.percentile(samples_ms, [25, 50, 75])
    return (q3 - q1) / ROBUST_SIGMA / med if med > 0 else math.inf


def summarize(samples_ms: list[float] | np.ndarray) -> Stats:
    x = np.asarray(samples_ms, dtype=np.float64)
    if x.size == 0:
        raise ValueError("no samples")
    q1, med, q3 = np.percentile(x, [25, 50, 75])
    noise = relative_noise(x)
    return Stats(float(med), float(q3 - q1), float(q1), float(q3), float(x.min()), float(x.mean()),
                 int(x.size), float(noise), samples_ms=[float(v) for v in x])


def measure(backend, launch, settings: TimingSettings = TimingSettings(), last=None) -> Stats:
    """Time `launch` (a no-argument callable that enqueues one kernel) on `backend`. `last` (an
    audit.LastBatch): once the stop rule has ended the samples, one more batch is timed with the outputs
    poisoned before it and checked after it, and the device is synchronized whole after it (`_last_batch`)."""
    if VERDICTS_ONLY[0]:
        settings = replace(settings, **ONE_SAMPLE)
    gpu_ms = est = backend.timed(launch, 1)  # warm-up
    reps = 1
    # Without a sample length to reach (min_sample_ms 0) every estimate below would pick reps 1: none is timed.
    if not settings.cold and settings.min_sample_ms > 0:
        est = backend.timed(launch, 1)
        gpu_ms += est
        reps = max(1, min(MAX_REPS, math.ceil(settings.min_sample_ms / max(est, 1e-6))))
        if est >= PROBE_BELOW * settings.min_sample_ms and not settings.host_issued:
            # A long host read may be the host's hiccup, not the launch: on the H100 three 7-32 us convolutions'
            # reads passed 0.2 ms in 3 of 20 fresh ci.yaml runs, which left them at reps 1 (+1 to +18%; a false
            # SLOWER, lab/journal/measurement.md, session 6). One launch queued behind the blocking kernel
            # says which it is.
            est = backend.timed_samples(launch, 1, 1)[0]
            gpu_ms += est
            reps = max(1, min(MAX_REPS, math.ceil(settings.min_sample_ms / max(est, 1e-6))))
        if est < PROBE_BELOW * settings.min_sample_ms and not settings.host_issued:
            # A launch timed alone, as the host issues it, reads its issue latency more than its run (an 8 us
            # convolution read 17-25 us), so reps picked from it came out 1, 2 or 3 by chance between processes,
            # and a sample of 1 launch reads up to 8% slower per launch than one of 2 (the event pair's cost is
            # shared by fewer launches): the tiny cases' medians moved that much between identical runs
            # (lab/journal/measurement.md). So the per-launch time is read as the samples will run: a batch
            # queued behind the blocking kernel; and reps is rounded up to a power of two, so that a per-launch
            # time near a boundary flips it rarely, and then between two counts that share the pair's cost alike.
            probe = min(MAX_REPS, 4 * reps)  # (a host read up to PROBE_BELOW x too long still gets 4 launches)
            while True:
                try:
                    est = backend.timed_samples(launch, probe, 1)[0]
                    break
                except QueueFull:
                    probe = fit_to_queue(backend, launch, probe)[0]
            gpu_ms += probe * est
            need = settings.min_sample_ms / max(est, 1e-6)
            reps = min(MAX_REPS, 1 << max(0, math.ceil(math.log2(need)))) if need > 1 else 1
    # Hot samples go in batches queued behind one blocking kernel; a cold sample stands alone,
    # since the L2 flush between samples is host-issued.
    if settings.cold or settings.host_issued:
        batch = 1
    else:
        reps, batch = fit_to_queue(backend, launch, reps)
    tel = backend.telemetry() if hasattr(backend, "telemetry") and not VERDICTS_ONLY[0] else None
    probes: list = []
    during = (lambda: probes.append(tel.probe())) if tel is not None else None
    kept: list[float] = []
    dropped: list[float] = []
    slow: set[int] = set()  # the probes of dropped batches
    t_end = time.perf_counter() + settings.budget_s
    converged = False
    issued = 0  # host-issued samples so far
    covered = 0.0  # ms of samples so far
    if tel is not None:
        one_ms = est if not settings.cold else gpu_ms
        tel.start(max(settings.budget_s, settings.min_samples * reps * one_ms / 1e3))
    if settings.host_issued:
        _freeze_heap()
    try:
        while len(kept) + len(dropped) < settings.max_samples:
            if settings.cold:
                backend.flush_l2()
            count = min(batch, settings.max_samples - len(kept) - len(dropped))
            if settings.host_issued:
                # One probe per BATCH samples, as a hot batch has, taken while the sample's launches run
                # (inside `timed`, before it waits): a probe after every sample would leave the GPU idle
                # for its 8-40 us each time, and the decision below applies to the samples it covers.
                if during is not None and issued % BATCH == 0:
                    got = [backend.timed(launch, reps, during)]
                else:
                    got = [backend.timed(launch, reps)]
                issued += 1
            else:
                probed = len(probes)
                try:
                    got = backend.timed_samples(launch, reps, count, during) if tel is not None else \
                        backend.timed_samples(launch, reps, count)
                except QueueFull:
                    del probes[probed:]  # the void batch's
                    fit, batch = fit_to_queue(backend, launch, reps)
                    if fit != reps:  # one sample of `reps` launches overfills the queue: start again with shorter ones
                        reps, kept, dropped, slow, covered = fit, [], [], set(), 0.0
                        probes.clear()
                    continue
            keep = settings.keep_throttled or KEEP_THROTTLED[0]
            if tel is not None and not keep and probes and tel.throttled(probes[-1]):
                dropped += got
                slow.add(len(probes) - 1)
            else:
                kept += got
            covered += reps * sum(got)
            if covered < HOST_WINDOW_MS and issued_by_host(backend, launch, settings.host_issued):
                continue
            if len(kept) >= settings.min_samples:
                if relative_noise(kept) <= settings.max_noise:
                    converged = True
                    break
                if time.perf_counter() >= t_end:
                    break
            elif len(kept) + len(dropped) >= settings.min_samples and time.perf_counter() >= t_end + settings.budget_s:
                break  # throttled throughout twice the budget: keep what there is
        if last is not None:
            audited = _last_batch(backend, launch, settings, last, reps, batch)
            if not last.single:
                kept += audited[0]
    finally:
        if settings.host_issued:
            gc.unfreeze()
    if tel is not None:
        tel.stop()
    everything = kept + dropped
    stats = summarize(kept or dropped)
    if last is not None:
        got, stats.settle_ms, stats.last_failure = audited
        stats.last_batch_ms = (1 if last.single else reps) * float(np.sum(got))
        gpu_ms += stats.last_batch_ms if last.single else 0.0  # else its samples are among `everything`
    stats.dropped = len(dropped) if kept else 0
    stats.reps, stats.converged = reps, converged
    stats.gpu_ms = gpu_ms + reps * float(np.sum(everything))
    stats.timing = timing_method(backend, launch, settings.cold, batch, settings.host_issued)
    if tel is None:
        stats.sm_clock_mhz = None if VERDICTS_ONLY[0] else backend.sm_clock_mhz()
    else:
        _clocks(stats, tel, probes, [p for i, p in enumerate(probes) if i not in slow] if kept else probes)
    measure_energy(stats, backend, launch, tel, settings)
    return stats


class Solo:
    """The agreement of one process with itself (`measure_collective` outside MPI, tests)."""

    def max(self, value: float) -> float:
        return value

    def min(self, value: float) -> float:
        return value


COLLECTIVE_WARMUP = 3  # launches before the estimate, the same count on every rank


def measure_collective(backend, launch, agree, settings: TimingSettings = TimingSettings()) -> Stats:
    """`measure` for a launch that holds a collective (a data-parallel step's allreduce), called by every
    rank with `agree` (max and min of a number over the ranks, e.g. exchange.World). Every rank must
    issue the launch equally often, or the last collective waits forever for a partner; so each choice
    that `measure` makes alone is agreed here: a fixed warm-up, reps and batch size from the ranks'
    max/min estimate, samples that end only once every rank's stop rule would end them, and a batch
    whose blocking kernel timed out on any rank is void on all (no launch is probed alone, as `measure`
    probes: it would wait for the others' matching call). The void batch's size is halved on every rank,
    down to one launch a sample; should even that time out, every rank falls back to host-issued samples
    and `timing` says so. Otherwise the samples are `measure`'s hot ones: queued behind the blocking
    kernel, `reps` launches between each event pair, so neither host issue nor the gap between samples
    is timed. The Stats are this rank's own; the caller takes the ranks' max as the step (the slowest
    rank sets it). No NVML readings or energy window: an energy window's launch count is each rank's own."""
    gpu_ms = sum(backend.timed(launch, 1) for _ in range(COLLECTIVE_WARMUP))
    est = agree.max(backend.timed(launch, 1))
    gpu_ms += est
    host = settings.host_issued
    reps = max(1, min(MAX_REPS, math.ceil(settings.min_sample_ms / max(est, 1e-6))))
    reps, batch = fit_to_queue(backend, launch, reps)
    reps, batch = int(agree.min(reps)), 1 if host else int(agree.min(batch))
    kept: list[float] = []
    covered = 0.0
    t_end = time.perf_counter() + settings.budget_s
    if host:
        _freeze_heap()
    try:
        while True:
            void = False
            if host:
                got = [backend.timed(launch, reps)]
            else:
                try:
                    got = backend.timed_samples(launch, reps, batch, collective=True)
                except QueueFull:
                    got, void = [], True
            if agree.max(float(void)):
                if batch > 1:
                    batch //= 2
                elif reps > 1:
                    reps //= 2
                else:
                    host = True
                continue
            kept += got
            covered += reps * sum(got)
            done = len(kept) >= settings.max_samples or (
                len(kept) >= settings.min_samples and (not host or covered >= HOST_WINDOW_MS)
                and (relative_noise(kept) <= settings.max_noise or time.perf_counter() >= t_end))
            if agree.min(float(done)):
                break
    finally:
        if host:
            gc.unfreeze()
    stats = summarize(kept)
    stats.reps, stats.converged = reps, relative_noise(kept) <= settings.max_noise
    stats.gpu_ms = gpu_ms + reps * float(np.sum(kept))
    stats.timing = HOST if not backend.runs_kernels else HOST_ISSUED if host else timing_method(
        backend, launch, False, batch)
    stats.sm_clock_mhz = backend.sm_clock_mhz()
    stats.energy_note = "not measured: a collective's launch count must match across ranks" \
        if energy_asked(settings) else ENERGY_OFF
    return stats


def energy_asked(settings: TimingSettings) -> bool:
    """Whether a call measures energy: its settings say so, or they leave it to the command line's --energy."""
    return ENERGY[0] if settings.energy is None else settings.energy


def measure_energy(stats: Stats, backend, launch, tel, settings: TimingSettings) -> None:
    """The energy columns of `stats`: a cool-down, then a window of extra launches read on NVML's energy counter
    (nnbench/runtime/energy.py), where energy is asked for; else energy_j stays empty and energy_note says why."""
    import nnbench.runtime.energy as energy  # the module itself, not the package: runtime/__init__ opens backends
    if not energy_asked(settings):
        stats.energy_note = ENERGY_OFF
        return
    if tel is None:
        stats.energy_note = f"not measured: {energy.NO_COUNTER}"
        return
    energy.cool_down(tel.nvml.power_w)
    got = energy.window(tel.nvml.energy_mj, launch, backend.synchronize, stats.median_ms * 1e-3)
    if got.reason is not None:
        stats.energy_note = f"not measured: {got.reason}"
        return
    stats.energy_j, stats.energy_window_j = got.per_launch_j, got.window_j
    stats.power_w, stats.energy_method = got.watts, "counter"
    stats.energy_window_ms = 1e3 * got.window_s


def _last_batch(backend, launch, settings: TimingSettings, last, reps: int, batch: int):
    """(samples, settle ms, failure) of the audited last batch: poisoned before it is queued, so no work enters
    its events; then the whole device is synchronized, on the host's clock, so work that a launch left running
    outside the timed stream is waited for here (audit.hidden_work judges it); then checked. A batch of the
    timed ones' shape, or one launch where `last.single`. A wait that looks like hidden work is timed again
    after up to SETTLE_TRIES - 1 more such batches (unpoisoned, unchecked) and the shortest kept: hidden work
    comes back with every batch, a host thread descheduled for a while (9 ms on a loaded 2-core host) rarely
    twice in a row."""
    from nnbench import audit
    last.poison()
    reps, count = (1, 1) if last.single else (reps, batch)

    def one() -> tuple[list[float], float]:
        if settings.cold:
            backend.flush_l2()
        if settings.cold or settings.host_issued or issued_by_host(backend, launch, settings.host_issued):
            got = [backend.timed(launch, reps) for _ in range(count)]
        else:
            try:
                got = backend.timed_samples(launch, reps, count)
            except QueueFull:
                got = [backend.timed(launch, reps)]
        t0 = time.perf_counter()
        backend.synchronize()
        return got, 1e3 * (time.perf_counter() - t0)

    got, settle_ms = one()
    failure = last.check()
    for _ in range(SETTLE_TRIES - 1):
        if not audit.enabled(audit.HIDDEN_WORK) or audit.hidden_work(settle_ms, reps * float(np.sum(got))) is None:
            break
        settle_ms = min(settle_ms, one()[1])
    return got, settle_ms, failure


class RunWatch:
    """NVML over timed runs that `measure` does not drive: PyTorch's per-sample epochs (nnbench's own per-sample
    versions are `measure`d, nnbench/workloads/train/mlp.py), each a sample timed by events as the host issues
    it. Each run is probed once while its launches execute (`during`, given to the run's `timed` before it waits); the
    energy counter is read over the whole window where it lasts ENERGY_COUNTER_S or more (a trainer's
    runs usually do), else the probes' power. `stats` applies measure's rules to the samples: a run
    probed throttled is dropped from the statistics (not from the training) and counted, unless
    throttled samples are kept or every run was throttled. Without NVML every reading stays None."""

    def __init__(self, backend) -> None:
        from nnbench.runtime.nvml import ENERGY_COUNTER_S
        self.tel = backend.telemetry() if hasattr(backend, "telemetry") and not VERDICTS_ONLY[0] else None
        self.probes: list = []
        if self.tel is not None:
            self.tel.start(ENERGY_COUNTER_S)

    @property
    def during(self):
        """The probe to call while a run executes, or None without NVML (nothing to call)."""
        return None if self.tel is None else (lambda: self.probes.append(self.tel.probe()))

    def stats(self, samples_ms: list[float], skip: int = 0, keep_throttled: bool = False) -> Stats:
        """The samples after the first `skip` (warm-up) runs, summarized with the NVML columns; the
        probes match the samples one to one (a run without its probe keeps its sample, unjudged). A trainer's
        runs are not repeated in an energy window, so energy_j stays empty here and energy_note says so."""
        stats = self._stats(samples_ms, skip, keep_throttled)
        stats.energy_note = "not measured: PyTorch's per-sample epochs are not repeated" if ENERGY[0] else ENERGY_OFF
        return stats

    def _stats(self, samples_ms: list[float], skip: int, keep_throttled: bool) -> Stats:
        samples = list(samples_ms)[skip:]
        probes = self.probes[skip:skip + len(samples)] if self.tel is not None else []
        if self.tel is None or len(probes) != len(samples):
            stats = summarize(samples)
            if self.tel is not None:
                self.tel.stop()
                _clocks(stats, self.tel, probes, probes)
            return stats
        self.tel.stop()
        keep = keep_throttled or KEEP_THROTTLED[0]
        slow = [not keep and self.tel.throttled(p) for p in probes]
        kept = [x for x, s in zip(samples, slow) if not s]
        stats = summarize(kept or samples)
        stats.dropped = len(samples) - len(kept) if kept else 0
        kept_probes = [p for p, s in zip(probes, slow) if not s] if kept else probes
        _clocks(stats, self.tel, probes, kept_probes)
        return stats


def _clocks(stats: Stats, tel, probes: list, kept: list) -> None:
    """The NVML columns of `stats`: clocks from the probes of the kept batches, the throttle reasons
    seen over all of them, and the window's energy."""
    sm = [p.sm_mhz for p in kept if p.sm_mhz]
    mem = [p.mem_mhz for p in kept if p.mem_mhz]
    bits = [p.reasons for p in probes if p.reasons is not None]
    stats.sm_clock_mhz = float(np.median(sm)) if sm else None
    stats.sm_clock_min_mhz = float(min(sm)) if sm else None
    stats.mem_clock_mhz = float(np.median(mem)) if mem else None
    if bits:
        from nnbench.runtime.nvml import USER_CLOCKS, reason_names
        seen = 0
        for b in bits:
            seen |= b
        stats.throttle = reason_names(seen & ~USER_CLOCKS & ~0x1)  # idle and user clocks are not throttling
        stats.clocks_locked = bool(seen & USER_CLOCKS)
    stats.energy_window_ms = 1e3 * tel.window_s if tel.window_s else None
    watts = [p.power_w for p in kept if p.power_w is not None]
    if tel.energy_j is not None and tel.window_s:
        stats.power_w, stats.energy_method = tel.energy_j / tel.window_s, "counter"
    elif watts:
        stats.power_w, stats.energy_method = float(np.mean(watts)), tel.power_method


def queue_room(backend, launch) -> int:
    """Launches of `launch` (each sample's event pair counted as two) that the backend may queue behind its
    blocking kernel at once: MAX_QUEUED, or what a full queue taught it (nnbench/runtime/cuda.py)."""
    room = getattr(backend, "queue_room", None)
    return room(launch) if room is not None else MAX_QUEUED


def fit_to_queue(backend, launch, reps: int) -> tuple[int, int]:
    """(reps, samples per batch) within the queue's room: a sample's launches are cut to fit only where
    one sample alone overfills it (a launch that queues many kernels, at large reps)."""
    room = queue_room(backend, launch)
    reps = max(1, min(reps, room - 2))
    return reps, max(1, min(BATCH, room // (reps + 2)))


def issued_by_host(backend, launch, host_issued: bool) -> bool:
    """Whether `launch`'s samples are issued by the host as they go: asked for (`host_issued`), or fallen
    back to on a GPU (a launch that synchronizes inside, such as a vendor call that waits, found when the
    blocking kernel times out). Such samples take the host's window (HOST_WINDOW_MS)."""
    return host_issued or backend.issued_by_host(launch)


def timing_method(backend, launch, cold: bool, batch: int, host_issued: bool = False) -> str:
    """How `measure` timed `launch`: asked of the backend after the samples, since the fallback to
    host-issued launches happens inside it, on the first batch whose blocking kernel times out."""
    if not backend.runs_kernels:  # times on the host clock
        return HOST
    if issued_by_host(backend, launch, host_issued):
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


def conditioned_error(out: np.ndarray, ref: np.ndarray, magnitude: np.ndarray) -> float:
    """max |out - ref| / magnitude over the outputs, in float64, where `magnitude` is what enters each output
    (for GEMM |alpha|(|A||B|) + |beta||C0|): cancellation can make ref small, never this. An output whose
    magnitude is 0 must be exact (0 if it is, else inf); any NaN or inf in `out` gives inf."""
    out64 = np.asarray(out, dtype=np.float64)
    if not np.all(np.isfinite(out64)):
        return math.inf
    diff = np.abs(out64 - np.asarray(ref, dtype=np.float64))
    mag = np.asarray(magnitude, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(mag > 0, diff / np.where(mag > 0, mag, 1.0), np.where(diff > 0, math.inf, 0.0))
    return float(ratio.max()) if ratio.size else 0.0


def accumulation_bound(n: int, u: float) -> float:
    """The largest error, relative to the sum of the magnitudes, of n terms each rounded once in a chain of
    sums (products, the sums in any order, alpha's and beta's terms): the deterministic gamma_n = nu / (1 - nu)
    (Higham, Accuracy and Stability, 2002, Lemma 3.1) or, where smaller, the probabilistic one at LAMBDA."""
    det = n * u / (1 - n * u) if n * u < 1 else math.inf
    return min(det, math.expm1(LAMBDA * math.sqrt(n) * u + n * u * u / (1 - u)))


def error_limit(precision: str | None, terms: int, epilogue: int = 2) -> float:
    """The limit on `conditioned_error` for an output that sums `terms` products (GEMM's K, a convolution's
    taps C*R*S) in `precision` (nnbench.runtime.device's names), plus `epilogue` roundings after the sum
    (alpha * sum + beta * C0: two). Derived in docs/VERIFICATION.md:
      FP32 (FFMA, host)  accumulation_bound(terms + epilogue, 2^-24)
      TF32               each product off by (1 + 2^-10)^2 - 1 from its operands' truncation, deterministic
                         (a truncation error has a sign: it does not average out), plus the FP32 sum
      3xTF32             big*big + big*small + small*big: the dropped small*small and the small parts' own
                         truncation leave 3 * 2^-20 per product, plus the FP32 sum of 3 * terms products
    The tensor-core rows sum with the truncated unit roundoff."""
    from nnbench.runtime.device import TF32, TF32X3
    n = max(int(terms), 1)
    if precision == TF32:
        return (1 + U_TF32_OPERAND) ** 2 - 1 + accumulation_bound(n + epilogue, U_FP32_TRUNCATED)
    if precision == TF32X3:
        return 3 * U_TF32_OPERAND ** 2 + accumulation_bound(3 * n + epilogue, U_FP32_TRUNCATED)
    return accumulation_bound(n + epilogue, U_FP32)


def precision_scale(precision: str | None, terms: int) -> float:
    """How many times FP32's error_limit a precision's is for sums of `terms` products (1 for FP32 and the host):
    a limit measured on float32 arithmetic (the trainers', LeNet-5's) scaled to a row of that precision."""
    from nnbench.runtime.device import FFMA
    return max(1.0, error_limit(precision, terms, epilogue=0) / error_limit(FFMA, terms, epilogue=0))


def rel_err_from_sums(err_sq: float, ref_sq: float) -> float:
    """The same ratio from sum((out-ref)^2) and sum(ref^2), as the GPU verifier returns them."""
    if not math.isfinite(err_sq):
        return math.inf
    return math.sqrt(err_sq / ref_sq) if ref_sq > 0 else math.sqrt(err_sq)


def weight_change_error(got, ref, init) -> float:
    """A trainer's check: how far its weight changes from `init` are from the float64 reference's,
    relative to the reference's changes (the changes, not the weights, so that the start cancels)."""
    num = math.sqrt(sum(float(np.sum(((g - w0) - (r - w0)) ** 2)) for g, r, w0 in zip(got, ref, init)))
    den = math.sqrt(sum(float(np.sum((r - w0) ** 2)) for r, w0 in zip(ref, init)))
    return num / den if math.isfinite(num) else math.inf
