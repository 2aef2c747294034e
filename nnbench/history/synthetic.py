"""Synthetic histories with known change points: what the change-point tests and the figure in docs/HISTORY.md
are made of. Each commit's run has one case per entry of `cases`; its median moves by `noise` (relative, normal)
from commit to commit, and by `steps` ({commit index: relative change}) from that commit on."""

from __future__ import annotations

import datetime as dt

import numpy as np

from nnbench.history.source import Case, Run

START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
GPU = "synthetic GPU"  # never a real device's name: these numbers were not measured


def commit(i: int) -> str:
    """A fake, stable 40-hex commit id for history position i."""
    return f"{i:04d}" + "c0ffee" * 6


def series(n: int, base_ms: float, noise: float, steps: dict[int, float], rng: np.random.Generator) -> np.ndarray:
    level = np.full(n, base_ms)
    for at, change in steps.items():
        level[at:] *= 1 + change
    return level * (1 + noise * rng.standard_normal(n))


def history(n: int = 100, steps: dict[int, float] | None = None, noise: float = 0.01, seed: int = 0,
            cases: dict[str, float] | None = None, samples: int = 0, gpu: str = GPU) -> list[Run]:
    """`n` runs, one per commit, in history order. With `samples`, each case carries that many raw samples
    (spread 0.5% around its median)."""
    rng = np.random.default_rng(seed)
    cases = cases or {"tiled": 0.25}
    medians = {v: series(n, ms, noise, steps or {}, rng) for v, ms in cases.items()}
    runs = []
    for i in range(n):
        stamp = (START + dt.timedelta(hours=i)).isoformat(timespec="seconds")
        run = Run(commit(i), gpu, "runner-1", stamp, "0.1.0", f"synthetic-{i}.csv")
        for variant, m in medians.items():
            raw = (m[i] * (1 + 0.005 * rng.standard_normal(samples))).tolist() if samples else None
            fields = {"workload": "gemm", "variant": variant, "step": "2", "params": "TS=32", "shape": "1024×1024×1024",
                      "cold": "False", "unit": "launch", "status": "PASS", "median_ms": float(m[i]),
                      "iqr_ms": float(m[i] * 0.004), "samples": samples or 100, "git_sha": commit(i), "gpu": gpu,
                      "host": "runner-1", "timestamp": stamp}
            run.cases.append(Case(fields, raw))
        runs.append(run)
    return runs


def write(run: Run, path) -> None:
    """The run as a results file, as a sweep writes it: a `--json` file where `path` ends in .json (raw samples
    under "raw"), else a result CSV (raw samples in its `samples_ms` column)."""
    from nnbench import rawresults, results
    sink = rawresults.JsonSink(path) if str(path).endswith(".json") else results.CsvSink(path)
    try:
        for c in run.cases:
            sink.append(dict(c.fields, samples_ms=c.samples_ms))
    finally:
        sink.close()
