"""Search strategies replayed against finished brute-force results (issue 30's replay target).

Not the CLI because it runs the same sweep many times (strategies x seeds) and summarises across
runs; each run is exactly `nnbench sweep CONFIG --replay CSV` with the config's strategy, budget
and seed replaced (sweep.execute through nnbench.api, a worker process answering from the file).

    python3 lab/scripts/search_replay.py [--config configs/gemm_sweep.yaml] [--replay docs/data/figures/gemm_sweep_h100.csv]
        [--fraction 0.2] [--seeds 20] [--strategies random tpe] [--without VARIANT ...]
        [--out lab/data/search/replay.csv]

`--without` drops variants from the config's space: with the winning variant gone, the same file
is a second space with its best case elsewhere (a check on a strategy tuned on the whole space).

Per shape: the brute-force best (the fastest PASS row of the file), the budget (fraction x the
cases brute force timed there), and per strategy, over the seeds, the median of (best found /
best - 1) and how many seeds came within 3%.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from nnbench import config, replay, strategies, sweep  # noqa: E402

WITHIN = 0.03


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/gemm_sweep.yaml")
    ap.add_argument("--replay", default="docs/data/figures/gemm_sweep_h100.csv")
    ap.add_argument("--fraction", type=float, default=0.2)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--strategies", nargs="+", default=["random", "tpe"])
    ap.add_argument("--without", nargs="+", default=[], metavar="VARIANT", help="variants to drop from the space")
    ap.add_argument("--out", help="CSV of every run (strategy, seed, shape, evaluated, best found, excess)")
    args = ap.parse_args()

    spec = config.load_sweep(Path(args.config))
    spec = replace(spec, cases=[c for c in spec.cases if c.variant.name not in args.without])
    rows = replay.load(Path(args.replay), spec.workload_name)
    replay.check_space(spec, rows, Path(args.replay))
    best, timed = {}, {}
    for s in spec.shapes:
        ms = [r["median_ms"] for (v, p, sh), r in rows.items() if sh == s.label and r["status"] == "PASS"
              and any(c.variant.name == v and c.param_label == p for c in spec.cases)]
        best[s.label], timed[s.label] = min(ms), len(ms)
    cases = min(int(args.fraction * n) for n in timed.values())
    per_shape = ", ".join(f"{k} {v} timed" for k, v in timed.items())
    print(f"{args.config} replayed from {args.replay}: per shape {per_shape}; budget {cases} cases per shape "
          f"({args.fraction:.0%})")
    runs = []
    folder = Path(tempfile.mkdtemp(prefix="nnbench-replay-"))
    for name in args.strategies:
        t0 = time.perf_counter()
        for seed in range(args.seeds):
            run_spec = replace(spec, strategy=name, budget=strategies.Budget(cases=cases), seed=seed, vendor=False)
            outcome = sweep.execute(run_spec, sweep.RunOptions(out=folder / f"{name}-{seed}.csv",
                                                               replay=Path(args.replay)))
            for found in outcome.searches:
                excess = found["best_ms"] / best[found["shape"]] - 1
                runs.append(dict(strategy=name, seed=seed, shape=found["shape"], evaluated=found["evaluated"],
                                 candidates=found["candidates"], best_ms=found["best_ms"], best=found["best"],
                                 brute_force_ms=best[found["shape"]], excess=excess))
        print(f"  {name}: {args.seeds} seeds in {time.perf_counter() - t0:.0f} s")
    print(f"\n| strategy | shape | evaluations (of brute force's) | median excess over the best | seeds within "
          f"{WITHIN:.0%} |\n|---|---|---|---|---|")
    for name in args.strategies:
        for s in spec.shapes:
            mine = [r for r in runs if r["strategy"] == name and r["shape"] == s.label]
            ex = [r["excess"] for r in mine]
            print(f"| {name} | {s.label} | {mine[0]['evaluated']} of {timed[s.label]} | "
                  f"{100 * statistics.median(ex):.2f}% | {sum(e <= WITHIN for e in ex)} of {len(ex)} |")
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(runs[0]))
            w.writeheader()
            w.writerows(runs)
        print(f"\nCSV: {out}")


if __name__ == "__main__":
    main()
