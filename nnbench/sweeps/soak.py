"""The soak (`nnbench soak`): fresh seeds over tiny and odd problems on every path a backend has, so that a
verdict that depends on the draw shows itself. Each seed runs every workload's cases at their defaults on
every problem through the harness (verified as always; timed once, since only the verdict matters here); a
FAIL or ERROR row is reported with its seed and the command that runs that seed alone again.

What a row costs beyond its verdict is paid once per process, not per seed: the kernels are compiled (or
looked up in the cubin cache, which hashes every source and header) once per workload, and the tiles are
the variants' fixed ones (no autotuner). Per (seed, problem) the inputs and their float64 reference are made
once and shared by the vendor rows and every case; each row is still verified against it with its outputs
poisoned, and audited, as always. `nnbench soak --gpus` spreads the seeds over processes
(nnbench/sweeps/soakpool.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from nnbench import harness, measure, workloads
from nnbench.workloads.base import Case

WORKLOADS = ("gemm", "conv", "train")
# Each sample is one launch after the warm-up: the soak checks verdicts, not times. (measure.VERDICTS_ONLY, set
# while a soak runs, holds the trainers' own timing settings to the same.)
ONCE = measure.TimingSettings(**measure.ONE_SAMPLE)


def problems(workload: str, seed: int = 0) -> list:
    """The tiny and odd problems: GEMMs of one element, of one row or column, and of odd sizes; convolutions of 1x1
    images, 1x1 and 5x5 filters, stride 2 and padding, and LeNet-5's step on 1 and 7 images; the smallest nets,
    per sample and in odd mini-batches. A
    net's draws (initial weights, noisy letters) come from its own hyperparameters, not the session's seed, so
    the seed goes into the net's problem."""
    if workload == "gemm":
        from nnbench.workloads.gemm.problem import Shape
        return [Shape(*d) for d in ((1, 1, 1), (1, 1, 7), (7, 1, 1), (17, 13, 5), (33, 1, 65), (127, 129, 131))]
    if workload == "conv":
        from nnbench.workloads.conv.problem import ConvShape
        from nnbench.workloads.conv.session import LeNetProblem
        return [ConvShape(*d) for d in ((1, 1, 1, 1, 1, 1, 1, 0), (1, 1, 1, 1, 2, 3, 1, 1), (1, 1, 7, 7, 1, 1, 1, 0),
                                        (2, 3, 5, 7, 3, 3, 2, 1), (3, 5, 9, 9, 2, 3, 2, 0), (1, 4, 6, 5, 5, 5, 1, 2))] \
            + [LeNetProblem(1), LeNetProblem(7)]  # a whole model's step: one image, and an odd batch of 7
    from nnbench.workloads.train.session import problem_for
    return [problem_for("1", max_iterations=3, seed=seed),
            problem_for("1", batch=7, epochs=1, train_samples=61, seed=seed)]


@dataclass
class Failure:
    workload: str
    seed: int
    row: dict

    def command(self, backend: str) -> str:
        return f"nnbench soak --workload {self.workload} --backend {backend} --seed {self.seed}"

    def line(self, backend: str) -> str:
        r = self.row
        why = r.get("error") or f"error {r.get('rel_err'):.3g} > limit {r.get('rtol'):.3g}"
        return (f"{r.get('status')} {self.workload} {r.get('variant')} {r.get('params') or ''} at {r.get('shape')}, "
                f"seed {self.seed}: {why}; again: {self.command(backend)}")


@dataclass
class Outcome:
    seeds: list[int] = field(default_factory=list)  # the seeds that ran, every workload of each
    rows: int = 0
    failures: list[Failure] = field(default_factory=list)
    # why the run ended before its last seed: "time" (the deadline passed at a seed boundary), "fault" (a kernel
    # fault poisoned the context: the seeds after it need a fresh process); None when every seed ran
    stopped: str | None = None
    seconds: float = 0.0

    def take(self, name: str, seed: int, rec: dict, on_row: Callable[[str, int, dict], None] | None) -> None:
        """One row of workload `name` at `seed`: counted, passed on, and kept where it failed."""
        self.rows += 1
        if on_row is not None:
            on_row(name, seed, rec)
        if rec.get("status") in ("FAIL", "ERROR"):
            self.failures.append(Failure(name, seed, rec))


def fresh_seeds(count: int) -> list[int]:
    """`count` seeds from the operating system's entropy, each a 32-bit value the CSV's seed column takes."""
    return [int(s) for s in np.random.SeedSequence().generate_state(count)]


def cases(workload: str, backend) -> list[Case]:
    """Every path the backend has for `workload`, at its defaults."""
    work = workloads.workload(workload)
    return [Case.defaults(v) for v in work.variants(backend.name) if work.runs_on(v, backend.name)]


@dataclass
class Prepared:
    """What a process pays once for all its seeds: each workload's cases and their compiled modules."""

    cases: dict[str, list[Case]]
    compiled: dict[str, dict]


def prepare(backend, names: list[str]) -> Prepared:
    chosen = {name: cases(name, backend) for name in names}
    # Once per process, not per seed: even a warm cubin cache hashes every source and header of every case at each
    # lookup. (A host backend's cases have no source: nothing to compile, and no nvcc runs.)
    return Prepared(chosen, {name: workloads.workload(name).compile(backend.arch, chosen[name]) for name in names})


def soak(backend, names: list[str], seeds: list[int], on_row: Callable[[str, int, dict], None] | None = None,
         env: dict | None = None, deadline: float | None = None, prepared: Prepared | None = None,
         on_start: Callable[[str, int], None] | None = None, on_seed: Callable[[int], None] | None = None) -> Outcome:
    """Every workload of `names` at every seed, seed by seed; the vendor rows run too where the backend has them.
    `env`: the environment every row carries (results.environment). `deadline` (time.time()): no seed starts
    after it. `prepared`: this process's `prepare`, where the caller made it. `on_start(workload, seed)` before
    each workload's run of a seed and `on_seed(seed)` after its last (a worker tells its parent where it is). A
    kernel fault ends the run after its seed: the context is poisoned."""
    t0 = time.perf_counter()
    out = Outcome()
    prepared = prepared or prepare(backend, names)
    was, measure.VERDICTS_ONLY[0] = measure.VERDICTS_ONLY[0], True
    try:
        _seeds(backend, names, seeds, on_row, env, deadline, prepared, on_start, on_seed, out)
    finally:
        measure.VERDICTS_ONLY[0] = was
    out.seconds = time.perf_counter() - t0
    return out


def _seeds(backend, names, seeds, on_row, env, deadline, prepared, on_start, on_seed, out: Outcome) -> None:
    """`soak`'s loop over the seeds, into `out`."""
    for seed in seeds:
        if deadline is not None and time.time() >= deadline:
            out.stopped = "time"
            break
        for name in names:
            work = workloads.workload(name)
            if on_start is not None:
                on_start(name, seed)
            chosen = prepared.cases[name]
            # a problem none of the backend's paths takes (LeNet-5's on the CPU backend) would only make its data
            mine = [p for p in problems(name, seed) if any(work.applies(c, p) for c in chosen)]
            for rec in harness.run(work, backend, chosen, mine, ONCE,
                                   work.default_rtol, seed, env or {}, compiled=prepared.compiled[name]):
                out.take(name, seed, rec, on_row)
                if rec.get("fault"):
                    out.stopped = "fault"
            if out.stopped == "fault":
                break
        out.seeds.append(seed)
        if on_seed is not None:
            on_seed(seed)
        if out.stopped == "fault":
            break
