"""Stopping rules replayed on recorded samples, no GPU: how many samples the bimodal cases of GEMM step 4's
213-case space would draw, and how much that moves a sweep's kernel time from run to run (issue 30: a
pair's run phases differ by about 2% through these cases alone; lab/journal/sweep.md).

    python3 lab/scripts/sweep_stopping_replay.py CSV [CSV ...] [--draws 2000] [--seed 0]

A case counts as bimodal here when it drew more than its first batch in 3 or more of the files. Its
recorded samples are cut into the batches measure queued them in (10 each, behind one blocking kernel),
pooled over the files, and a run is replayed by drawing whole batches at random: after each batch a rule
decides whether to stop, and the 0.5 s budget ends it as in nnbench/measure.py (budget / (10 x median)
batches, plus the one that crosses it). Whole batches keep what happens inside a batch (a mode that holds
for several launches); pooling over processes mixes their modes, so the spread between runs is an
estimate, not a measurement. The rules (measure.py is not changed by this script):
- `noise`: today's rule, the robust relative spread IQR / 1.349 / median <= 1%;
- `ci1`, `ci05`: the median's distribution-free 95% interval (order statistics, as lab/scripts/sweep_pairs.py)
  has a half-width <= 1% (0.5%) of the median: a rule on how well the median is known rather than on
  how spread the samples are, so a case whose two modes keep its median in one place stops;
- `min20`: today's rule after at least two batches.
"""

from __future__ import annotations

import argparse
import collections
import math
import random
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sweep_pairs import rows, sign_interval  # noqa: E402

from nnbench.measure import BATCH, TimingSettings  # noqa: E402  (samples queued behind one blocking kernel)
from nnbench.measure import relative_noise as noise  # noqa: E402  (today's rule, measure's own code)

BUDGET_S = TimingSettings().budget_s


def ci_half_width(x: list[float]) -> float:
    lo, hi, cover = sign_interval(x, 0.95)
    return (hi - lo) / 2 / statistics.median(x) if cover >= 0.95 else math.inf


RULES = {"noise": lambda x: noise(x) <= 0.01, "ci1": lambda x: ci_half_width(x) <= 0.01,
         "ci05": lambda x: ci_half_width(x) <= 0.005, "min20": lambda x: len(x) >= 20 and noise(x) <= 0.01}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csvs", nargs="+", type=Path)
    ap.add_argument("--draws", type=int, default=2000, help="replayed runs")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    batches: dict = collections.defaultdict(list)
    drawn: dict = collections.defaultdict(list)
    for path in args.csvs:
        for case, r in rows(path).items():
            s = r["samples"]
            drawn[case].append(len(s))
            batches[case] += [s[i:i + BATCH] for i in range(0, len(s) - BATCH + 1, BATCH)]
    cases = [c for c, n in drawn.items() if sum(k > BATCH for k in n) >= 3]
    rng = random.Random(args.seed)
    kernel_s = {name: np.zeros(args.draws) for name in RULES}
    print(f"{len(args.csvs)} files, {len(cases)} bimodal cases; samples per case, mean ± sd over {args.draws} "
          "replayed runs, per rule: " + ", ".join(RULES))
    for case in cases:
        pool = batches[case]
        med = statistics.median(v for b in pool for v in b)
        most = max(1, int(BUDGET_S * 1e3 / (BATCH * med)) + 1)
        line = f"{case[1]:36s} {med:5.2f} ms, drew {sorted(drawn[case])}"
        for name, stop in RULES.items():
            counts = []
            for t in range(args.draws):
                x: list[float] = []
                for _ in range(most):
                    x += rng.choice(pool)
                    if stop(x):
                        break
                counts.append(len(x))
                kernel_s[name][t] += len(x) * med / 1e3
            line += f" | {name} {statistics.mean(counts):.0f} ± {statistics.pstdev(counts):.0f}"
        print(line)
    print("these cases' kernel time per run, mean ± sd:")
    for name, k in kernel_s.items():
        print(f"  {name:6s} {k.mean():.2f} ± {k.std():.2f} s")


if __name__ == "__main__":
    main()
