"""Calibration of the history's change-point detection (nnbench/history/changepoints.py) on synthetic 100-commit
histories, and the figure in docs/HISTORY.md. Not the CLI: it measures the detector itself over many seeds.

    python lab/scripts/history_changepoints.py [--seeds 200] [--figure docs/img/history_step.png]

For each setting it counts, over SEEDS histories with 1% normal noise per commit: change points found on a flat
history (false alarms), a heavy-tailed flat history (Student t, 3 degrees of freedom, scaled to 1%), and whether
a planted 5% (and 3%) step at a random commit between 20 and 80 is found exactly there, alone.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from nnbench.history import changepoints, synthetic


def rates(seeds: int, max_pvalue: float, min_change: float) -> dict[str, int]:
    n = {"flat": 0, "heavy": 0, "5% exact": 0, "5% found": 0, "3% found": 0}
    for seed in range(seeds):
        rng = np.random.default_rng(10_000 + seed)
        at = int(rng.integers(20, 80))
        flat = synthetic.series(100, 1.0, 0.01, {}, rng)
        heavy = 1 + 0.01 * rng.standard_t(3, 100) / np.sqrt(3)
        noise = synthetic.series(100, 1.0, 0.01, {}, rng)
        step5, step3 = noise.copy(), noise.copy()
        step5[at:] *= 1.05
        step3[at:] *= 1.03

        def found(v):
            return [c.index for c in changepoints.detect(v, max_pvalue, min_change)]
        n["flat"] += bool(found(flat))
        n["heavy"] += bool(found(heavy))
        f5 = found(step5)
        n["5% exact"] += f5 == [at]
        n["5% found"] += at in f5
        n["3% found"] += at in found(step3)
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--figure", default=None, help="write the docs figure (a 100-commit history, one 5%% step)")
    args = ap.parse_args()
    print(f"{args.seeds} synthetic histories of 100 commits, 1% noise; counts out of {args.seeds}")
    print(f"{'max p':>8} {'min change':>10} {'flat FP':>8} {'heavy FP':>8} {'5% exact':>9} {'5% found':>9} "
          f"{'3% found':>9} {'s':>6}")
    for p in (0.001, 0.0001, 0.00001):
        for m in (0.01, 0.02):
            t = time.perf_counter()
            r = rates(args.seeds, p, m)
            print(f"{p:>8g} {100 * m:>9g}% {r['flat']:>8} {r['heavy']:>8} {r['5% exact']:>9} {r['5% found']:>9} "
                  f"{r['3% found']:>9} {time.perf_counter() - t:>6.1f}")
    if args.figure:
        figure(args.figure)


def figure(path: str) -> None:
    """Two cases through the real store and trend code: a planted +5% step at commit 60, and a flat one."""
    import tempfile
    from pathlib import Path

    from nnbench.history import db, figures, migrations, store, trend
    with tempfile.TemporaryDirectory() as tmp:
        with db.connect(Path(tmp) / "h.sqlite") as d:
            migrations.ready(d)
            for run in synthetic.history(100, {60: 0.05}, seed=2026, cases={"tiled": 0.25}):
                store.record(d, run)
            for run in synthetic.history(100, {}, seed=2027, cases={"coarsened": 0.12}):
                store.record(d, run)
            found = trend.trends(store.points(d))
        for t in found:
            print(t.variant, "change points at", [t.commits[c.index][:9] for c in t.change_points],
                  "(planted: 0060c0ffe)" if t.variant == "tiled" else "(planted: none)")
            out = Path(path) if t.variant == "tiled" else Path(path).with_name(Path(path).stem + "_flat.png")
            written = figures.write(t, Path(tmp))
            out.write_bytes(written.read_bytes())
            print("figure:", out)


if __name__ == "__main__":
    main()
