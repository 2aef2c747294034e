"""Sharding a sweep over workers (issue 30's target: 4 workers, 200 cases of 50 ms, wall <= 1.1 x serial / 4).

Not the CLI because it compares several runs of one sweep. Each run is `nnbench sweep CONFIG
--replay CSV --backend cpu [--gpus N]` with a 50 ms sleep standing in for each case's kernel (the
replay worker sleeps, then answers the case from the file), so it needs no GPU and the work per
case is known exactly: what is measured is the sweep's own dispatch, pipes and writes.

    python3 lab/scripts/sweep_scaling.py [--workers 4] [--cases 100] [--sleep-ms 50] [--out FILE]

The config is configs/gemm_sweep.yaml under `strategy: random` with `cases` per shape (two
shapes: 2 x 100 = 200 cases) and no vendor rows. Time is the run phase (first job to last record),
which every run reports as `run_s`; workers start before it, while the plan is compiled.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from nnbench import config, results, strategies, sweep  # noqa: E402


def run(spec, replay: Path, workers: int, sleep_ms: float, folder: Path) -> dict:
    out = folder / f"w{workers}.csv"
    o = sweep.execute(spec, sweep.RunOptions("cpu", out, replay=replay, replay_sleep_ms=sleep_ms,
                                             gpus=tuple(range(workers)) if workers > 1 else ()))
    return {"workers": workers, "cases": o.jobs, "skipped": o.skipped, "run_s": o.run_s, "wall_s": o.wall_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/gemm_sweep.yaml")
    ap.add_argument("--replay", default="docs/data/figures/gemm_sweep_h100.csv")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--cases", type=int, default=100, help="per shape")
    ap.add_argument("--sleep-ms", type=float, default=50.0)
    ap.add_argument("--out", help="JSON with every figure")
    args = ap.parse_args()
    spec = replace(config.load_sweep(Path(args.config)), strategy="random", vendor=False,
                   budget=strategies.Budget(cases=args.cases))
    folder = Path(tempfile.mkdtemp(prefix="nnbench-scaling-"))
    serial = run(spec, Path(args.replay), 1, args.sleep_ms, folder)
    sharded = run(spec, Path(args.replay), args.workers, args.sleep_ms, folder)
    ideal = serial["run_s"] / args.workers
    ratio = sharded["run_s"] / ideal
    line = (f"{serial['cases']} cases of {args.sleep_ms:g} ms: serial {serial['run_s']:.2f} s, {args.workers} workers "
            f"{sharded['run_s']:.2f} s = {ratio:.3f} x (serial / {args.workers}) (target <= 1.1)")
    print(line)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"serial": serial, "sharded": sharded, "ratio_to_ideal": ratio,
                                   "sleep_ms": args.sleep_ms, "host": platform.node(),
                                   "cpus": os.cpu_count(),
                                   "git_sha": results.git_sha(), "command": " ".join(sys.argv)}, indent=1) + "\n")


if __name__ == "__main__":
    main()
