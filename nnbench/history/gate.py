"""`nnbench check --against-history`: each case of a run against its last stable segment in the history (the
commits after its last change point), instead of against one baseline file.

The segment becomes one baseline row per case and goes through the gate's own rule (verdict.compare), so the
verdicts, their meaning and the exit code are those of `check`:
- where every run in the segment and the current run carry raw samples, the segment's samples are pooled and
  the rank test decides (verdict.compare_samples), with the case's between-run spread over the segment
  (`run_spread`: the relative standard deviation of its runs' medians, at least 1% over fewer than 10 runs:
  verdict.run_spread_of) raising the tolerance to 5 times it where that is more;
- otherwise the segment's median of per-commit medians is the baseline median, and its noise is the larger of
  the runs' own IQR and the spread between commits (the IQR of the per-commit medians): a run is SLOWER only
  beyond both the tolerance and what history itself moves by.
A case with fewer than `min_history` runs in its last stable segment is NEW (not enough history to judge).
A case of the history that the current run lacks is not reported: a history holds many configs' cases.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from nnbench import verdict
from nnbench.errors import NnbenchError
from nnbench.history import changepoints, db, migrations, source, store, trend

MIN_HISTORY = 3


@dataclass
class HistoryCheck:
    verdicts: list
    passed: bool
    notes: list[str] = field(default_factory=list)
    where: str = ""  # the database, for the title


def baseline(trends: list[trend.Trend], cur: pd.DataFrame, min_history: int = MIN_HISTORY
             ) -> tuple[pd.DataFrame, dict[str, str]]:
    """One baseline row per case with enough stable history, shaped as verdict.load's frame; and, for the
    cases without, why."""
    rows, short = {}, {}
    for t in trends:
        seg = t.stable
        n_runs = int(seg["runs"].sum())
        if n_runs < min_history:
            cps = f" after its last change point at {t.commits[t.stable_from][:9]}" if t.change_points else ""
            short[t.key] = f"{n_runs} run{'s' if n_runs != 1 else ''} of history{cps}; needs {min_history}"
            continue
        # the case's between-run spread (relative standard deviation of the medians of the segment's runs): the
        # rank test sees only the spread inside each run, so compare_samples raises the tolerance to a multiple of it
        per_run = np.concatenate([np.asarray(m, dtype=np.float64) for m in seg["run_medians"]])
        row = dict(cur.loc[t.key])
        row.update(verdict.pooled(seg["median_ms"].to_numpy(dtype=np.float64), list(seg["iqr_ms"].fillna(0)),
                                  list(seg["samples"]), run_medians=per_run),
                   status="PASS", error="", history=f"{len(seg)} commits from {seg['commit'].iloc[0][:9]}",
                   throttle="", dropped=0)  # (the row is the current run's: its throttle is not the history's)
        rows[t.key] = row
    base = pd.DataFrame.from_dict(rows, orient="index") if rows else cur.iloc[0:0].copy()
    base.attrs["notes"] = []
    return base, short


def check(target: str | None, current: str | Path, tolerance: float, min_history: int = MIN_HISTORY,
          max_pvalue: float = changepoints.MAX_PVALUE, min_change: float = changepoints.MIN_CHANGE,
          allow_missing: bool = False, allow_unstable: bool = False) -> HistoryCheck:
    cur = verdict.load(Path(current))
    gpus = verdict.gpus(cur)
    if len(gpus) > 1:
        raise NnbenchError(f"{current}: holds runs of several GPUs ({', '.join(sorted(gpus))}); check one at a time")
    digests = {r.digest for r in source.read(current)}  # the same run already recorded is not its own history
    with db.connect(target, create=False) as database:
        migrations.ready(database)
        points = store.points(database, gpu=next(iter(gpus)) if gpus else None, keys=set(cur.index),
                              with_samples=True, exclude_digests=digests)
        where = database.where
    base, short = baseline(trend.trends(points, max_pvalue, min_change), cur, min_history)
    found = verdict.compare(base, cur, tolerance)
    by_label = {(str(r["variant"]), str(r["params"]), str(r["shape"])): why
                for key, why in short.items() for _, r in cur.loc[[key]].iterrows()}
    for v in found:
        if v.verdict == "NEW":
            v.why = by_label.get((v.variant, v.params, v.shape), "no history for this case on this GPU")
    notes = list(cur.attrs.get("notes", []))
    if points.empty:
        notes.append(f"{where}: no history for any case of {current} on {', '.join(gpus) or 'this device'}")
    if (fallback := verdict.methods_note(found)) is not None:
        notes.append(fallback)
    return HistoryCheck(found, not verdict.gated(found, allow_missing, allow_unstable), notes, where)
