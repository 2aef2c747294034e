"""The gate's verdicts on the raw samples that lab/scripts/measurement_targets.py wrote: false alarms over
back-to-back identical runs, planted slowdowns caught, the noisy run. Runs on any machine (CPU).

Not the CLI because: it pairs 40 runs inside one file (by the record's `sweep` tag) and counts
verdicts over all pairs; each single comparison is `verdict.compare_samples`, the function that
`nnbench check` applies to every case with raw samples, and the older IQR rule beside it.

  python3 lab/scripts/measurement_verdicts.py DIR [--also DIR2] [--tolerance 0.05 0.02]

--also DIR2 appends DIR2's back-to-back runs to DIR's (renumbered after them: the runs of two device calls of
the same config, as one history); the planted runs stay DIR's.
"""

from __future__ import annotations

import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

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
        s = throttled(b, c, s)
        out.append((key, s, iqr_rule(b, c, tol)))
    return out


def throttled(b, c, s):
    """The gate's rule (verdict.compare) before the rank test: a side that ran throttled throughout is UNSTABLE."""
    why = verdict._throttled_throughout(b.fields, "the baseline") or verdict._throttled_throughout(c.fields,
                                                                                                  "the current run")
    return verdict.SampleComparison("UNSTABLE", s.ratio, s.p_value, s.uncertainty, why) if why else s


def spread_without(runs: dict, tags: list[str], leave_out: set[str]) -> dict[str, float]:
    """Each case's between-run relative standard deviation of the median over `tags` less `leave_out`:
    what a history of earlier runs would know, never the runs being compared."""
    out = {}
    for key in runs[tags[0]]:
        meds = np.array([runs[t][key].fields["median_ms"] for t in tags if t not in leave_out and key in runs[t]])
        if meds.size >= 3:
            out[key] = float(meds.std() / meds.mean())
    return out


def against_history(runs: dict, current: str, history: list[str], tol: float = verdict.HISTORY_TOLERANCE):
    """`check --against-history` on these runs, as nnbench/history/gate.py builds its baseline: per case the
    history runs' samples pooled, its between-run spread from their medians (verdict.run_spread_of: at least
    1% over fewer than 10 runs), and the rank test at the tolerance. [(key, SampleComparison)]"""
    out = []
    for key, c in runs[current].items():
        hist = [runs[t][key] for t in history if key in runs[t] and runs[t][key].status == "PASS"
                and runs[t][key].samples_ms is not None]
        if c.status != "PASS" or c.samples_ms is None or len(hist) < 3:
            continue
        spread = verdict.run_spread_of([h.fields["median_ms"] for h in hist])
        pooled = np.concatenate([h.samples_ms for h in hist])
        s = verdict.compare_samples(pooled, c.samples_ms, tol, run_spread=spread)
        why = verdict._throttled_throughout(c.fields, "the current run")
        out.append((key, verdict.SampleComparison("UNSTABLE", s.ratio, s.p_value, s.uncertainty, why) if why else s))
    return out


def history_report(pairs_runs: dict | None, planted_runs: dict | None) -> dict:
    """The gate's defaults on the data: each second run of a pair against the others as its history (all other
    runs, and only the earlier ones); each planted and noisy run against the clean runs."""
    rep: dict = {"tolerance": verdict.HISTORY_TOLERANCE, "k": verdict.RUN_SPREAD_K,
                 "min_spread_runs": verdict.MIN_SPREAD_RUNS}
    if pairs_runs:
        tags = sorted((t for t in pairs_runs if t.startswith("run-")), key=lambda t: int(t[4:]))
        for name, pick in (("others", lambda i: [t for t in tags if t != tags[i]]), ("earlier", lambda i: tags[:i])):
            counts, lines = Counter(), []
            for k in range(len(tags) // 2):
                b = 2 * k + 1
                for key, s in against_history(pairs_runs, tags[b], pick(b)):
                    counts[s.verdict] += 1
                    if s.verdict != "SAME":
                        lines.append(f"{tags[b]}: {key} {s.verdict} {100 * (s.ratio - 1):+.2f}% {s.why}")
            rep[f"pairs_vs_{name}"] = {"comparisons": sum(counts.values()), "verdicts": dict(counts), "not_same": lines}
    if planted_runs:
        clean = sorted((t for t in planted_runs if t.startswith("clean-")), key=lambda t: int(t.split("-")[1]))
        for prefix in ("plant3-", "noisy20-", "noisy0-"):
            counts, ratios = Counter(), []
            for tag in sorted(t for t in planted_runs if t.startswith(prefix)):
                for _key, s in against_history(planted_runs, tag, clean):
                    counts[s.verdict] += 1
                    ratios.append(s.ratio)
            if ratios:
                rep[prefix.rstrip("-")] = {"runs": len(ratios), "verdicts": dict(counts),
                                           "change_pct": [round(100 * (r - 1), 2) for r in ratios]}
        rep["clean_between_run_spread_pct"] = {
            key: 100 * verdict.run_spread_of([planted_runs[t][key].fields["median_ms"] for t in clean])
            for key in planted_runs[clean[0]]}
    return rep


def find(d: Path, name: str) -> Path:
    return d / name if (d / name).exists() else d / f"{name}.gz"


def main() -> None:
    d = Path(sys.argv[1])
    args = sys.argv[2:]
    tols = [float(x) for x in args[args.index("--tolerance") + 1:]] if "--tolerance" in args else [0.05, 0.02, 0.01]
    also = Path(args[args.index("--also") + 1]) if "--also" in args else None
    report: dict = {}
    pairs_path = find(d, "pairs.jsonl")
    planted_path = find(d, "planted.jsonl")
    pairs_runs = by_tag(pairs_path) if pairs_path.exists() else None
    if pairs_runs is not None and also is not None:
        first = len([t for t in pairs_runs if t.startswith("run-")])
        pairs_runs.update({f"run-{first + int(t[4:])}": v for t, v in by_tag(find(also, "pairs.jsonl")).items()
                           if t.startswith("run-")})
    planted_runs = by_tag(planted_path) if planted_path.exists() else None
    report["history_gate_defaults"] = history_report(pairs_runs, planted_runs)
    if pairs_runs is not None:
        runs = pairs_runs
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
