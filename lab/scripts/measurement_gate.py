"""The gate's verdicts on the runs that lab/scripts/measurement_gate.sh wrote (fresh CLI processes, one CSV a run),
through `nnbench.check` itself (api.check: the code `nnbench check` runs). Runs on any machine (CPU).

  python3 lab/scripts/measurement_gate.py DIR [--baseline-runs 10] [--committed FOLDER]

- pairs: run 2k+1 of each back-to-back pair (2k, 2k+1) checked against a baseline of 10 runs that ends with run
  2k (the runs before it; for the first pairs, the runs after the pair fill it up): the gate of a CI run made
  right after its baseline was re-made; and the same pair by the two-file rule (run 2k alone, 5%);
- committed (with --committed FOLDER, the gate's committed baseline, whose files are copies of some of DIR's runs):
  every other ci.yaml run checked against that folder, as `nnbench check --run configs/ci.yaml` does in CI;
- per case: the between-run spread, and the launches per sample (reps) each run chose;
- planted: each planted run checked against the folder of the 10 clean runs; each clean run against the other 9;
- the wall time of every run (runs.log).
Prints one JSON document.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from nnbench import api, verdict  # noqa: E402


def gate(base: list[Path], cur: Path, tolerance: float | None = None) -> api.CheckResult:
    tol = verdict.default_tolerance(len(verdict.baseline_files(base)) > 1) if tolerance is None else tolerance
    return api.check([str(p) for p in base], str(cur), tol)


def summary(results: list[tuple[str, api.CheckResult]]) -> dict:
    counts, lines = Counter(), []
    for name, res in results:
        for v in res.verdicts:
            counts[v.verdict] += 1
            if v.verdict != "SAME":
                ch = f"{100 * v.change:+.2f}%" if v.change is not None else ""
                lines.append(f"{name}: {v.workload} {v.variant} {v.shape} {v.verdict} {ch} {v.why}")
    return {"checks": len(results), "verdicts": dict(counts), "failed_gates": sum(not r.passed for _, r in results),
            "not_same": lines}


def spreads(files: list[Path]) -> dict[str, float]:
    """Each case's between-run relative standard deviation of the median over `files`, in %."""
    frames = [verdict.load(f) for f in files]
    out = {}
    for key in frames[0].index:
        m = [float(f.loc[key, "median_ms"]) for f in frames if key in f.index and f.loc[key, "status"] == "PASS"]
        if len(m) >= 3:
            row = frames[0].loc[key]
            out[f"{row['variant']} {row['shape']}"] = round(100 * float(np.std(m, ddof=1) / np.mean(m)), 3)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def reps_by_case(files: list[Path]) -> dict[str, list[int]]:
    """Each case's launches per sample (reps) over `files`, where the runs did not all choose one count."""
    frames = [verdict.load(f) for f in files]
    out = {}
    for key in frames[0].index:
        got = sorted({int(float(f.loc[key, "reps"])) for f in frames
                      if key in f.index and pd.notna(f.loc[key, "reps"])})
        if len(got) > 1:
            row = frames[0].loc[key]
            out[f"{row['variant']} {row['shape']}"] = got
    return out


def option(name: str, default: str | None = None) -> str | None:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def main() -> None:
    d = Path(sys.argv[1])
    n_base = int(option("--baseline-runs", "10"))
    rep: dict = {"defaults": {"tolerance": verdict.HISTORY_TOLERANCE, "k": verdict.RUN_SPREAD_K,
                              "min_spread_runs": verdict.MIN_SPREAD_RUNS, "alpha": verdict.ALPHA}}
    runs = sorted((d / "pairs").glob("run-*.csv"))
    runs = runs[:len(runs) // 2 * 2]
    if runs:
        pooled, two = [], []
        for k in range(len(runs) // 2):
            a, b = 2 * k, 2 * k + 1
            before = [i for i in range(a + 1) if i != b][-n_base:]
            fill = [i for i in range(b + 1, len(runs))][:max(0, n_base - len(before))]
            base = [runs[i] for i in sorted(before + fill)]
            pooled.append((f"pair {k} (run {b} against {len(base)} runs)", gate(base, runs[b])))
            two.append((f"pair {k} (run {b} against run {a})", gate([runs[a]], runs[b])))
        rep["pairs"] = {"pairs": len(runs) // 2, "cases_per_run": len(verdict.load(runs[0])),
                        "baseline_of_runs": summary(pooled), "two_files_5pct": summary(two)}
        rep["between_run_spread_pct"] = spreads(runs)
        rep["reps_not_one_count"] = reps_by_case(runs)
        if (folder := option("--committed")) is not None:
            committed = verdict.baseline_files(folder)
            same = {f.read_bytes() for f in committed}
            judged = [r for r in runs if r.read_bytes() not in same]
            res = [(f"{r.stem} against the committed baseline", gate([Path(folder)], r)) for r in judged]
            rep["committed"] = dict(folder=folder, baseline_runs=[f.name for f in committed],
                                    judged_runs=[r.stem for r in judged], **summary(res))
    clean = sorted((d / "plant").glob("clean-*.csv"))
    planted = sorted((d / "plant").glob("plant-*.csv"), key=lambda p: int(p.stem.split("-")[1]))
    if clean:
        res = [(p.stem, gate(clean, p)) for p in planted]
        rep["planted"] = summary(res)
        rep["planted"]["caught"] = sum(v.verdict == "SLOWER" for _, r in res for v in r.verdicts)
        rep["planted"]["change_pct"] = [round(100 * v.change, 2) for _, r in res for v in r.verdicts if v.change]
        loo = [(c.stem, gate([x for x in clean if x != c], c)) for c in clean]
        rep["clean_vs_other_clean"] = summary(loo)
        rep["clean_spread_pct"] = spreads(clean)
    log = d / "runs.log"
    if log.exists():
        walls = {"ci": [], "plant": []}
        for line in log.read_text().splitlines():
            m = re.match(r"(\S+)\.csv rc=(\d+) wall=(\d+) ms", line)
            if m:
                walls["ci" if m.group(1).startswith("run-") else "plant"].append(int(m.group(3)) / 1e3)
        rep["wall_s"] = {k: {"runs": len(v), "median": float(np.median(v)), "min": min(v), "max": max(v)}
                         for k, v in walls.items() if v}
    print(json.dumps(rep, indent=1))


if __name__ == "__main__":
    main()
