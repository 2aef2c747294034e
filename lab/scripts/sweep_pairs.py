"""What `--gpus 1` costs over a plain sweep, from the A/A pairs of lab/scripts/sweep_overhead.py, with the
stopping rule's draw taken out (issue 30's target: at most 2%; lab/journal/sweep.md says why).

    python3 lab/scripts/sweep_pairs.py DIR [DIR ...] [--json OUT] [--seed 0]

Each DIR holds one call's overhead.json and the CSVs it names (plain_N.csv, gpus1_N.csv). A pair's two runs
measure the same kernels with the same stopping rule, but a few bimodal cases stop after 10 samples or
run their 0.5 s budget almost at random, which moves a run's wall time by about 2%. Per pair:
- `wall`: run phase, `--gpus 1` over plain (what a user sees, with the draw in it);
- `matched`: the same ratio once each case's samples beyond the count both runs drew are taken out
  of its run (their event-timed kernel time: reps x the samples, in the order drawn). What is left is
  the same measurement effort on both sides, so a slower path (time outside kernels) or slower kernels
  still show, and the draw does not;
- `outside`: the difference of the time outside kernels (run phase less event-timed kernel time), as a
  share of the plain run: the machinery alone;
- `steady`: the same after the first record: most of a warm run's time outside kernels (2.1-2.7 s of
  2.6-3.1 s) is the wait for the worker's first problem (its float64 reference, built on the host's
  BLAS while the parent's compile, short on a warm cache, ends), the same code in both paths and
  +-0.3 s from run to run;
- `kernels`: the median over cases of the per-case median ratio (are the same kernels slower?);
- `per_sample`: run phase per sample drawn, `--gpus 1` over plain (shown because it is the obvious
  normalisation; it is biased: the extra samples come from the few cases that drew them, whose sample
  length, 0.35 to 38 ms, is not the run's mean);
- `samples`: samples drawn, `--gpus 1` less plain.
Over the pairs: the median, a distribution-free interval for it (order statistics, exact coverage by
the sign test's binomial, the narrowest symmetric one covering at least 90%), and a bootstrap
percentile interval (95%, 10,000 resamples of the pairs).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import random
import statistics
import sys
from pathlib import Path

METRICS = ("wall", "matched", "outside", "steady", "kernels", "per_sample", "samples")


def rows(path: Path) -> dict[tuple[str, str, str], dict]:
    """A run's CSV by case (variant, params, shape): its samples in the order drawn, reps and median."""
    got = {}
    with open(path, newline="", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            if r.get("status") != "PASS" or not r.get("samples_ms"):
                continue
            got[(r["variant"], r["params"], r["shape"])] = {
                "samples": [float(x) for x in r["samples_ms"].split()], "reps": int(r["reps"]),
                "median_ms": float(r["median_ms"]), "gpu_ms": float(r["gpu_ms"])}
    return got


def beyond(a: dict, b: dict) -> float:
    """Seconds of `a`'s event-timed kernel time in samples beyond the count that `b` drew of the same case."""
    return sum(r["reps"] * sum(r["samples"][len(b[k]["samples"]):]) for k, r in a.items() if k in b) / 1e3


def pair(g: dict, p: dict, g_rows: dict, p_rows: dict) -> dict:
    """One pair's figures (module docstring); g and p are the runs' overhead.json entries."""
    common = g_rows.keys() & p_rows.keys()
    ratios = sorted(g_rows[k]["median_ms"] / p_rows[k]["median_ms"] for k in common)
    g_n = sum(len(r["samples"]) for r in g_rows.values())
    p_n = sum(len(r["samples"]) for r in p_rows.values())
    g_matched = g["run_s"] - beyond(g_rows, p_rows)
    p_matched = p["run_s"] - beyond(p_rows, g_rows)
    outside = (g["run_s"] - g["kernel_s"]) - (p["run_s"] - p["kernel_s"])
    steady = outside - (g["first_record_s"] - p["first_record_s"])
    return {"wall": g["run_s"] / p["run_s"] - 1, "matched": g_matched / p_matched - 1,
            "outside": outside / p["run_s"], "steady": steady / p["run_s"], "kernels": statistics.median(ratios) - 1,
            "per_sample": (g["run_s"] / g_n) / (p["run_s"] / p_n) - 1, "samples": g_n - p_n,
            "outside_s": outside, "cases": len(common), "run_s": (g["run_s"], p["run_s"]),
            "beyond_s": (g["run_s"] - g_matched, p["run_s"] - p_matched)}


def pairs_of(folder: Path) -> list[dict]:
    """Every complete pair in one call's folder, in its order."""
    got = json.loads((folder / "overhead.json").read_text())
    out = []
    i = 1
    while f"gpus1_{i}" in got and f"plain_{i}" in got:
        g_rows, p_rows = rows(folder / f"gpus1_{i}.csv"), rows(folder / f"plain_{i}.csv")
        fig = pair(got[f"gpus1_{i}"], got[f"plain_{i}"], g_rows, p_rows)
        out.append(dict(fig, commit=got.get("git_sha", "")[:12], folder=str(folder), pair=i))
        i += 1
    return out


def sign_interval(values: list[float], least: float = 0.90) -> tuple[float, float, float]:
    """(low, high, coverage): the order statistics x(k), x(n+1-k) with the largest k whose interval
    covers the median with probability >= `least` for any continuous distribution (sign test)."""
    xs = sorted(values)
    n = len(xs)
    best = (xs[0], xs[-1], 1 - 2 * 0.5 ** n) if n else (math.nan, math.nan, 0.0)
    for k in range(1, n // 2 + 1):
        # P(x(k) <= median <= x(n+1-k)) = 1 - 2 P(Binomial(n, 1/2) <= k - 1)
        cover = 1 - 2 * sum(math.comb(n, j) for j in range(k)) / 2 ** n
        if cover < least:
            break
        best = (xs[k - 1], xs[n - k], cover)
    return best


def bootstrap_interval(values: list[float], seed: int = 0, draws: int = 10_000) -> tuple[float, float]:
    """95% percentile interval of the median over resamples of the pairs."""
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(draws))
    return meds[int(0.025 * draws)], meds[int(0.975 * draws) - 1]


def summary(figs: list[dict], seed: int = 0) -> dict:
    out = {}
    for m in METRICS:
        vals = [f[m] for f in figs]
        lo, hi, cover = sign_interval(vals)
        b_lo, b_hi = bootstrap_interval(vals, seed)
        out[m] = {"median": statistics.median(vals), "rank_interval": (lo, hi), "rank_coverage": cover,
                  "bootstrap95": (b_lo, b_hi), "values": vals,
                  "above_zero": sum(v > 0 for v in vals), "n": len(vals)}
    return out


def fmt(m: str, v: float) -> str:
    return f"{v:+.0f}" if m == "samples" else f"{100 * v:+.2f}%"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--json", type=Path, help="write the pairs and the summary here")
    ap.add_argument("--seed", type=int, default=0, help="the bootstrap's seed")
    args = ap.parse_args()
    figs = [f for d in args.folders for f in pairs_of(d)]
    if not figs:
        sys.exit("no complete pair (overhead.json with gpus1_N and plain_N) in " + ", ".join(map(str, args.folders)))
    print("| commit | pair | wall | matched | outside kernels | after the first record | kernels (median case) "
          "| per sample | samples |")
    print("|---|---|---|---|---|---|---|---|---|")
    for f in figs:
        print(f"| {f['commit'][:7]} | {f['pair']} | " + " | ".join(fmt(m, f[m]) for m in METRICS) + " |")
    s = summary(figs, args.seed)
    print(f"\nover {len(figs)} pairs: median [order-statistic interval, coverage] [bootstrap 95%], pairs above 0")
    for m, v in s.items():
        lo, hi = v["rank_interval"]
        b_lo, b_hi = v["bootstrap95"]
        print(f"  {m:10s} {fmt(m, v['median'])} [{fmt(m, lo)}, {fmt(m, hi)}; {100 * v['rank_coverage']:.1f}%] "
              f"[{fmt(m, b_lo)}, {fmt(m, b_hi)}] {v['above_zero']} of {v['n']}")
    if args.json:
        args.json.write_text(json.dumps({"pairs": figs, "summary": s}, indent=1) + "\n")


if __name__ == "__main__":
    main()
