"""The soak (`nnbench soak`): fresh seeds over tiny and odd problems on every path a backend has, so that a
verdict that depends on the draw shows itself. Each seed runs every workload's cases at their defaults on
every problem through the harness (verified as always; timed once, since only the verdict matters here); a
FAIL or ERROR row is reported with its seed and the command that runs that seed alone again."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from nnbench import harness, measure, workloads
from nnbench.workloads.base import Case

WORKLOADS = ("gemm", "conv", "train")
# Each sample is one launch after the warm-up: the soak checks verdicts, not times.
ONCE = measure.TimingSettings(budget_s=0.0, min_samples=1, max_samples=1, min_sample_ms=0.0, energy=False)


def problems(workload: str) -> list:
    """The tiny and odd problems: GEMMs of one element, of one row or column, and of odd sizes; convolutions of 1x1
    images, 1x1 and 5x5 filters, stride 2 and padding; the smallest nets, per sample and in odd mini-batches."""
    if workload == "gemm":
        from nnbench.workloads.gemm.problem import Shape
        return [Shape(*d) for d in ((1, 1, 1), (1, 1, 7), (7, 1, 1), (17, 13, 5), (33, 1, 65), (127, 129, 131))]
    if workload == "conv":
        from nnbench.workloads.conv.problem import ConvShape
        return [ConvShape(*d) for d in ((1, 1, 1, 1, 1, 1, 1, 0), (1, 1, 1, 1, 2, 3, 1, 1), (1, 1, 7, 7, 1, 1, 1, 0),
                                        (2, 3, 5, 7, 3, 3, 2, 1), (3, 5, 9, 9, 2, 3, 2, 0), (1, 4, 6, 5, 5, 5, 1, 2))]
    from nnbench.workloads.train.session import problem_for
    return [problem_for("1", max_iterations=3), problem_for("1", batch=7, epochs=1, train_samples=61)]


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
    seeds: list[int] = field(default_factory=list)
    rows: int = 0
    failures: list[Failure] = field(default_factory=list)


def fresh_seeds(count: int) -> list[int]:
    """`count` seeds from the operating system's entropy, each a 32-bit value the CSV's seed column takes."""
    return [int(s) for s in np.random.SeedSequence().generate_state(count)]


def cases(workload: str, backend) -> list[Case]:
    """Every path the backend has for `workload`, at its defaults."""
    work = workloads.workload(workload)
    return [Case.defaults(v) for v in work.variants(backend.name) if work.runs_on(v, backend.name)]


def soak(backend, names: list[str], seeds: list[int], on_row: Callable[[str, int, dict], None] | None = None,
         env: dict | None = None) -> Outcome:
    """Every workload of `names` at every seed; the vendor rows run too where the backend has them. `env`: the
    environment every row carries (results.environment)."""
    out = Outcome(seeds=list(seeds))
    for name in names:
        work, chosen, shapes = workloads.workload(name), cases(name, backend), problems(name)
        for seed in seeds:
            for rec in harness.run(work, backend, chosen, shapes, ONCE, work.default_rtol, seed, env or {}):
                out.rows += 1
                if on_row is not None:
                    on_row(name, seed, rec)
                if rec.get("status") in ("FAIL", "ERROR"):
                    out.failures.append(Failure(name, seed, rec))
    return out
