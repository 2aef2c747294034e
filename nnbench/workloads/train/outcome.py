"""What one training run made, for every trainer of the workload: per sample (mlp.py, fused.py), in
mini-batches (batched.py, ddp.py) and PyTorch's rows. Per sample is the mini-batch math at a batch of one,
so an iteration is a step: `steps` counts iterations there, `seconds_per_step` is the time per iteration.
The session turns an Outcome into the one record schema (session.unify); Outcomes stay in the process."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from nnbench import measure


@dataclass
class Outcome:
    version: str
    steps: int = 0  # iterations (per sample) or mini-batch steps trained
    epochs: int = 0
    converged: bool = False  # per sample: an epoch's mean error reached the tolerance
    final_error: float = math.nan
    # The row's time per step (per iteration, per sample): the median of `stats` where `measure` timed it,
    # else the host clock's (the NumPy versions)
    seconds_per_step: float = math.nan
    step_iqr_pct: float = math.nan
    timing: str | None = None  # how the step was timed (measure.TIMING)
    train_seconds: float = 0.0  # the whole training, events (GPU) or host clock
    seconds_per_feedforward: float = math.nan
    launches_per_step: int = 0
    threads_per_step: int = 0  # per sample: threads launched per iteration
    busy_threads_mean: float = 0.0  # per sample: threads with work, mean over the launches
    blocks: int | None = None  # the fused version's grid
    role_us: dict = field(default_factory=dict)  # mini-batch: role -> microseconds per step (launch medians)
    test_accuracy: float = math.nan
    train_accuracy: float = math.nan
    test_outputs: np.ndarray | None = field(default=None, repr=False)
    weights: list | None = field(default=None, repr=False)  # the trained weights, float64 (batched-numpy)
    comm_us: float | None = None  # the gradient allreduce per step (data-parallel runs), its calls timed alone
    compute_us: float | None = None  # data-parallel: the same step without its allreduces, timed as the step
    kernels_us: float | None = None  # the step's arithmetic alone: GPU launches timed alone; the CPU's host clock
    buckets: int | None = None  # data-parallel: allreduce calls per step
    own_step_us: float | None = None  # data-parallel: this rank's own median (seconds_per_step: the slowest rank's)
    error_curve: list[tuple[int, float]] = field(default_factory=list)
    stats: measure.Stats | None = None  # the timed samples (per step), with NVML's columns
    samples_s: list[float] = field(default_factory=list)  # seconds per step of each timed epoch (host clock rows)
    weights_rel_err: float | None = None  # a PyTorch row's check
    # The defenses against a kernel that games the timer (nnbench/audit.py): (defense, why or None)
    failures: list[tuple[str, str | None]] = field(default_factory=list)

    def timed_by(self, stats: measure.Stats) -> None:
        """The row's time per step from `stats` (per step already)."""
        self.stats, self.timing = stats, stats.timing
        self.seconds_per_step, self.step_iqr_pct = stats.median_ms * 1e-3, stats.iqr_pct
