"""The gate's verdicts on the raw samples that scripts/measurement_targets.py wrote: false alarms over
back-to-back identical runs, planted slowdowns caught, the noisy run. Runs on any machine (CPU).

Not the CLI because: it pairs 40 runs inside one file (by the record's `sweep` tag) and counts
verdicts over all pairs; each single comparison is `verdict.compare_samples`, the function that
`nnbench check` applies to every case with raw samples, and the older IQR rule beside it.

  python3 scripts/measurement_verdicts.py DIR [--tolerance 0.05 0.02]
"""

from __future__ import annotations

import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from nnbench import rawresults, verdict  # noqa: E402


def by_tag(path: Path) -> dict[str, dict[str, rawresults.RawRecord]]:
    runs: dict[str, dict] = defaultdict(dict)
    if path.suffix == ".gz":  # the committed copies are compressed
        import gzip
        import tempfile
        tmp = Path(tempfile.mkdtemp()) / path.stem
        tmp.write_bytes(gzip.decompress(path.read_bytes()))
        path = tmp
    for r in rawresults.load(path):
        runs[r.fields.get("sweep") or ""][r.key] = r
    return runs


def iqr_rule(b: rawresults.RawRecord, c: rawresults.RawRecord, tol: float) -> str:
    """Today's rule before this change (verdict.py's fallback), for comparison."""
    mb, mc = b.fields["median_ms"], c.fields["median_ms"]
    band = max(tol * mb, 0.5 * (b.fields["iqr_ms"] + c.fields["iqr_ms"]))
    return "SLOWER" if mc - mb > band else "FASTER" if mc - mb < -band else "SAME"


def compare_runs(base: dict, new: dict, tol: float, spread: dict | None = None):
    out = []
    for key, b in base.items():
        c = new.get(key)
        if c is None or b.status != "PASS" or c.status != "PASS" or b.samples_ms is None or c.samples_ms is None:
            continue
        s = verdict.compare_samples(b.samples_ms, c.samples_ms, tol, run_spread=(spread or {}).get(key))
        out.append((key, s, iqr_rule(b, c, tol)))
    return out


def spread_without(runs: dict, tags: list[str], leave_out: set[str]) -> dict[str, float]:
    """Each case's between-run relative standard deviation of the median over `tags` less `leave_out`:
    what a history of earlier runs would know, never the runs being compared."""
    out = {}
    for key in runs[tags[0]]:
        meds = np.array([runs[t][key].fields["median_ms"] for t in tags if t not in leave_out and key in runs[t]])
        if meds.size >= 3:
            out[key] = float(meds.std() / meds.mean())
    return out


def find(d: Path, name: str) -> Path:
    return d / name if (d / name).exists() else d / f"{name}.gz"


def main() -> None:
    d = Path(sys.argv[1])
    args = sys.argv[2:]
    tols = [float(x) for x in args[args.index("--tolerance") + 1:]] if "--tolerance" in args else [0.05, 0.02, 0.01]
    report: dict = {}
    pairs_path = find(d, "pairs.jsonl")
    planted_path = find(d, "planted.jsonl")
    if pairs_path.exists():
        runs = by_tag(pairs_path)
        n = len([t for t in runs if t.startswith("run-")]) // 2
        tags = [f"run-{i}" for i in range(2 * n)]
        for tol in tols:
            rank, pairs_hit = Counter(), 0
            for k in range(n):
                a, b = f"run-{2 * k}", f"run-{2 * k + 1}"
                found = [s.verdict for _key, s, _o in compare_runs(runs[a], runs[b], tol,
                                                                   spread_without(runs, tags, {a, b}))]
                rank.update(found)
                pairs_hit += "SLOWER" in found
            report[f"pairs_run_spread_tol_{tol:g}"] = {"rank": dict(rank), "pairs_with_a_slower": pairs_hit,
                                                       "k": verdict.RUN_SPREAD_K}
        for tol in tols:
            rank, iqr, worst = Counter(), Counter(), []
            slower_cases = []
            for k in range(n):
                for key, s, old in compare_runs(runs[f"run-{2 * k}"], runs[f"run-{2 * k + 1}"], tol):
                    rank[s.verdict] += 1
                    iqr[old] += 1
                    worst.append(abs(s.ratio - 1))
                    if s.verdict != "SAME":
                        slower_cases.append(f"pair {k}: {key} {s.verdict} {100 * (s.ratio - 1):+.2f}% {s.why}")
            pairs_hit = len({line.split(":")[0] for line in slower_cases if " SLOWER " in line})
            report[f"pairs_tol_{tol:g}"] = {"pairs_with_a_slower": pairs_hit,
                "pairs": n, "comparisons": sum(rank.values()), "rank": dict(rank), "iqr_rule": dict(iqr),
                "median_abs_change_pct": 100 * float(np.median(worst)) if worst else None,
                "max_abs_change_pct": 100 * float(np.max(worst)) if worst else None,
                "not_same": slower_cases}
    if planted_path.exists():
        runs = by_tag(planted_path)
        n = len([t for t in runs if t.startswith("plant3-")])
        clean = [f"clean-{i}" for i in range(n)]
        for tol in tols:
            caught = sum(s.verdict == "SLOWER" for i in range(n) for _key, s, _o in compare_runs(
                runs[f"clean-{i}"], runs[f"plant3-{i}"], tol, spread_without(runs, clean, {f"clean-{i}"})))
            report[f"planted3_run_spread_tol_{tol:g}"] = {"runs": n, "caught": caught}
        ratios = []
        for tol in tols:
            caught, verdicts = 0, Counter()
            for i in range(n):
                for _key, s, _old in compare_runs(runs[f"clean-{i}"], runs[f"plant3-{i}"], tol):
                    verdicts[s.verdict] += 1
                    caught += s.verdict == "SLOWER"
                    if tol == tols[0]:
                        ratios.append(s.ratio)
            report[f"planted3_tol_{tol:g}"] = {"runs": n, "caught": caught, "verdicts": dict(verdicts)}
        report["planted3_slowdown_pct"] = {"median": 100 * (float(np.median(ratios)) - 1) if ratios else None,
                                           "min": 100 * (min(ratios) - 1) if ratios else None,
                                           "max": 100 * (max(ratios) - 1) if ratios else None}
        noisy = sorted(t for t in runs if t.startswith("noisy20-"))
        for tol in tols:
            verdicts, old, lines = Counter(), Counter(), []
            for i, tag in enumerate(noisy):
                for key, s, o in compare_runs(runs[f"clean-{i}"], runs[tag], tol):
                    verdicts[s.verdict] += 1
                    old[o] += 1
                    lines.append(f"{tag}: {s.verdict} {100 * (s.ratio - 1):+.1f}% {s.why} (IQR rule: {o}); "
                                 f"noise {runs[tag][key].fields.get('noise')}")
            report[f"noisy20_tol_{tol:g}"] = {"runs": len(noisy), "rank": dict(verdicts), "iqr_rule": dict(old),
                                              "lines": lines}
        unplanted = sorted(t for t in runs if t.startswith("noisy0-"))
        verdicts = Counter()
        for i, tag in enumerate(unplanted):
            for _key, s, _o in compare_runs(runs[f"clean-{i}"], runs[tag], tols[0]):
                verdicts[s.verdict] += 1
        report["noisy0"] = {"runs": len(unplanted), "rank": dict(verdicts)}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
