"""Why nnbench's PyTorch eager row read above the independent timing (issue 25): one process, one
eager Net 8 step at B=4096, timed alternately by the independent loop (lab/scripts/independent_baselines.py:
torch events, `calls` steps a sample) and by nnbench's `measure` (host-issued, PyCUDA events, samples of at
least `min_sample_ms`), round after round, so the host's drift over seconds falls on every timer alike.
Also nnbench's own step program (the batch sliced from the training set each call, as suites/mlp.py's
train_torch does) against the independent's fixed tensors, under one timer.

    python3 lab/scripts/eager_timing_probe.py OUT.csv [--rounds 4]
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

NET8 = (120, *[500] * 13, 100, 7)


def steps(batch: int = 4096):
    """nnbench's step program (suites/mlp.py `torch_program`) on fixed tensors, as the independent
    script's step runs, and on the batch sliced from a 2-batch set each call, as train_torch runs it."""
    import torch

    from nnbench.workloads.train.mlp import torch_program
    torch.backends.cuda.matmul.allow_tf32 = False
    Ws = [(torch.rand(b, a, device="cuda") - 0.5).mul_(0.2).requires_grad_() for a, b in zip(NET8, NET8[1:])]
    bs = [torch.zeros(b, device="cuda", requires_grad=True) for b in NET8[1:]]
    opt = torch.optim.SGD([p for pair in zip(Ws, bs) for p in pair], lr=0.1, momentum=0.8)
    X, T = torch.rand(2 * batch, NET8[0], device="cuda"), torch.rand(2 * batch, NET8[-1], device="cuda")
    x, t = X[:batch].clone(), T[:batch].clone()
    sample, _, step_t = torch_program(Ws, bs, opt, X, T, batch)
    return (lambda: step_t(x, t)), (lambda: step_t(*sample(0)))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    import gc

    import torch
    from independent_baselines import events_median_ms

    from nnbench import measure
    from nnbench.runtime import open_backend
    from nnbench.workloads.train.batched import STEP_TIMING
    backend, _ = open_backend("cuda")
    fixed, sliced = steps()
    for _ in range(20):
        fixed()
    torch.cuda.synchronize()

    def independent(calls: int, samples: int):
        def run(fn):
            gc.collect()
            gc.freeze()
            try:
                return events_median_ms(fn, calls=calls, samples=samples)
            finally:
                gc.unfreeze()
        return run

    def nnbench_measure(sample_ms: float):
        def run(fn):
            s = measure.measure(backend, fn, replace(STEP_TIMING, host_issued=True, min_sample_ms=sample_ms))
            return s.median_ms, s.reps, s.samples, s.noise
        return run

    timers = {"independent calls=5": independent(5, 30), "independent calls=25": independent(25, 8),
              "measure 10 ms samples": nnbench_measure(10.0), "measure 100 ms samples": nnbench_measure(100.0)}
    rows = []
    for pinned in (False, True):
        if pinned:
            os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[1]})
        for r in range(args.rounds):
            for program, fn in (("fixed", fixed), ("sliced", sliced)):
                for name, timer in timers.items():
                    if program == "sliced" and name.startswith("independent"):
                        continue
                    t0 = time.perf_counter()
                    got = timer(fn)
                    wall = time.perf_counter() - t0
                    med, reps, n, noise = got if isinstance(got, tuple) else (got, None, None, None)
                    rows.append(dict(pinned=pinned, round=r, program=program, timer=name, median_ms=med, reps=reps,
                                     samples=n, noise=noise, wall_s=wall))
                    print(f"pinned={pinned} round {r} {program:6s} {name:24s} {med:.4f} ms  reps={reps} n={n} "
                          f"wall {wall:.2f}s", flush=True)
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    for pinned in (False, True):
        for program in ("fixed", "sliced"):
            for name in timers:
                v = [r["median_ms"] for r in rows if r["pinned"] == pinned and r["program"] == program
                     and r["timer"] == name]
                if v:
                    print(f"pinned={pinned} {program:6s} {name:24s} median over rounds {statistics.median(v):.4f} ms "
                          f"(range {min(v):.4f}-{max(v):.4f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
