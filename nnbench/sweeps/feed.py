"""A sweep's kernels compiled in the background while its first cases run (issue 44: sharded sweeps near linear).

Compiling every kernel before the first case leaves every GPU idle for the whole compile (nvcc on a cold cache,
the cache's lookups on a warm one). Here each distinct case's kernel is handed to a pool of compile threads in the
order the jobs will run, and a job waits, when it is sent to its worker, for its own kernel only: the first cases
run while later kernels still compile. Each compile is the workload's own (`Workload.compile` of one case), into the
same content-addressed cache, so what a case runs is what an up-front compile gives it.
"""

from __future__ import annotations

import os
import resource
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

from nnbench.errors import CompileError, NnbenchError


class KernelFeed:
    """Kernels of `cases` (in the order their jobs run) compiled on `jobs` threads, one nvcc each; `get(case)` waits
    for that case's kernel alone."""

    def __init__(self, work, arch: str, cases, jobs: int) -> None:
        self.work, self.arch = work, arch
        self.cases = list(dict.fromkeys(c for c in cases if c.variant.source))
        self.jobs = max(1, min(jobs, len(self.cases) or 1))
        self.started = time.perf_counter()
        self.last_done = self.started
        self._lock = threading.Lock()
        self._children_s = children_cpu_s()
        self._nvcc_cpu_s: float | None = None
        self._pool = ThreadPoolExecutor(max_workers=self.jobs, thread_name_prefix="nvcc")
        # Submitted in run order to a FIFO pool: the kernel a worker needs next is the next to start compiling.
        self.futures: dict[object, Future] = {c: self._pool.submit(self._one, c) for c in self.cases}

    def __contains__(self, case) -> bool:
        return case in self.futures

    def _one(self, case):
        try:
            got = self.work.compile(self.arch, [case], jobs=1).get(case)
        except (NnbenchError, OSError) as e:  # the case's ERROR row names it, as a failed nvcc's does
            got = CompileError(f"compiling {case.variant.name} {case.param_label}: {e}")
        with self._lock:
            self.last_done = time.perf_counter()
        return got

    def get(self, case):
        """The case's Compiled (or CompileError; None where the workload's compile only fills the cache)."""
        return self.futures[case].result()

    def wait_all(self) -> dict:
        """Every case's compile, once all have ended: case -> Compiled | CompileError | None."""
        got = {c: f.result() for c, f in self.futures.items() if not f.cancelled()}
        if self._nvcc_cpu_s is None:
            # The children reaped since the feed began: its nvcc processes (a worker reaped meanwhile, a restart,
            # adds its own time; the up-front compile has the same blind spot with a worker already running).
            self._nvcc_cpu_s = children_cpu_s() - self._children_s
        return got

    @property
    def wall_s(self) -> float:
        """From the first compile's start to the last one's end (the run's first cases overlap it)."""
        return self.last_done - self.started

    @property
    def nvcc_cpu_s(self) -> float:
        return self._nvcc_cpu_s or 0.0

    def close(self) -> None:
        """Stop: compiles not yet started are dropped (a Ctrl-C, a sweep that ended early); running ones finish."""
        self._pool.shutdown(wait=False, cancel_futures=True)


def children_cpu_s() -> float:
    """User and system CPU seconds of this process's reaped children so far (nvcc's, where a compile ran them)."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def feed_jobs(slots: int, jobs: int | None) -> int:
    """Compile threads beside `slots` running workers: one per core unless --jobs says, less a core per worker, so
    that nvcc does not take the cores that issue and verify the first cases (at least one thread)."""
    if jobs:
        return jobs
    return max(1, (os.cpu_count() or 1) - slots)
