"""Regression verdicts: a current result CSV against a baseline, case by case, aware of noise.

A case is the same case on both sides when suite, variant, params, shape and hot/cold agree
(`results.case_key_of`). Where a CSV holds a case twice (a resumed sweep, a retried ERROR), the
last row counts, and the file's `notes` say how many cases had more than one row.

  SLOWER   current median - baseline median > max(tolerance x baseline, combined noise)
  FASTER   the same, the other way
  SAME     inside that band: a difference inside the combined noise is SAME even above the
           tolerance, because it would not repeat
  FAILED   the current run failed verification (FAIL) or the kernel failed (ERROR)
  INVALID  a statistic on either side is not a positive finite number (a NaN, zero or infinite
           median, a negative or non-finite IQR, text), or the baseline's own row failed
  MISSING  in the baseline, not in the current run
  NEW      in the current run only
  SKIPPED  either side could not run it on its device

The gate fails on SLOWER, FAILED, INVALID and MISSING (MISSING is allowed with `allow_missing`):
a current file with no rows, or with a case that never ran, must not pass.

Combined noise is the mean of the two interquartile ranges: each side's IQR is how far apart
its own middle half of samples lie, so two medians closer than that cannot be told apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from nnbench import results
from nnbench.errors import NnbenchError

VERDICTS = ("SLOWER", "FAILED", "INVALID", "MISSING", "NEW", "SKIPPED", "FASTER", "SAME")
GATING = {"SLOWER", "FAILED", "INVALID", "MISSING"}
NEEDED = ["suite", "variant", "params", "shape", "cold", "median_ms", "iqr_ms", "status"]


@dataclass
class Verdict:
    variant: str
    params: str
    shape: str
    verdict: str
    base_ms: float | None = None
    cur_ms: float | None = None
    noise_ms: float | None = None
    why: str = ""

    @property
    def change(self) -> float | None:
        return self.cur_ms / self.base_ms - 1 if self.base_ms and self.cur_ms else None


def load(path: Path) -> pd.DataFrame:
    """A result CSV, one row per case (the last one wins), indexed by case key. `df.attrs["notes"]`
    lists what was set aside: rows without a valid status (cut short), cases with several rows."""
    df = results.read_csv(path, dtype=str, keep_default_na=False, na_values=[""])
    missing = [c for c in NEEDED if c not in df.columns]
    if missing:
        raise NnbenchError(f"{path}: not an nnbench result CSV; missing columns: {', '.join(missing)}")
    notes = []
    valid = df["status"].isin(results.STATUSES)
    if not valid.all():
        notes.append(f"{path}: {(~valid).sum()} rows without a valid status (cut short?) were set aside")
        df = df[valid]
    if "step" not in df.columns:
        df["step"] = ""
    ident = ["suite", "variant", "step", "params", "shape", "cold"]
    df[ident] = df[ident].fillna("").astype(str)
    df["step"] = [s[:-2] if s.endswith(".0") else s for s in df["step"]]  # pandas reads 3 as 3.0
    df["key"] = [results.case_key_of(dict(zip(ident, row))) for row in df[ident].itertuples(index=False)]
    repeated = df["key"].duplicated(keep="last")
    if repeated.any():
        cases = df.loc[repeated, "key"].nunique()
        notes.append(f"{path}: {cases} cases have more than one row ({repeated.sum()} earlier rows); "
                     "the last row of each counts")
    out = df[~repeated].set_index("key")
    out.attrs["notes"] = notes
    return out


def gpus(df: pd.DataFrame) -> set[str]:
    return set(df["gpu"].dropna().astype(str)) if "gpu" in df.columns else set()


def compare(base: pd.DataFrame, cur: pd.DataFrame, tolerance: float) -> list[Verdict]:
    out = []
    for key in list(base.index) + [k for k in cur.index if k not in base.index]:
        b = base.loc[key] if key in base.index else None
        c = cur.loc[key] if key in cur.index else None
        ref = c if c is not None else b
        v = Verdict(str(ref["variant"]), str(ref["params"]), str(ref["shape"]), "")
        out.append(v)
        b_bad = _bad_stats(b, "the baseline's") if b is not None and b["status"] == "PASS" else None
        c_bad = _bad_stats(c, "the current") if c is not None and c["status"] == "PASS" else None
        if b is not None and b["status"] == "PASS" and not b_bad:
            v.base_ms = float(b["median_ms"])
        if c is not None and c["status"] == "PASS" and not c_bad:
            v.cur_ms = float(c["median_ms"])
        if c is None:
            v.verdict, v.why = "MISSING", "not in the current run"
        elif c["status"] in results.FAILED:
            v.verdict, v.why = "FAILED", _failure(c)
        elif b is not None and b["status"] in results.FAILED:
            v.verdict, v.why = "INVALID", f"the baseline's row is {b['status']}: {_failure(b)}"
        elif c["status"] == "SKIP" or (b is not None and b["status"] == "SKIP"):
            v.verdict, v.why = "SKIPPED", str((c if c["status"] == "SKIP" else b).get("error") or "")
        elif b_bad or c_bad:
            v.verdict, v.why = "INVALID", b_bad or c_bad
        elif b is None:
            v.verdict, v.why = "NEW", "not in the baseline"
        else:
            v.noise_ms = 0.5 * (float(b["iqr_ms"]) + float(c["iqr_ms"]))
            band = max(tolerance * v.base_ms, v.noise_ms)
            diff = v.cur_ms - v.base_ms
            v.verdict = "SLOWER" if diff > band else "FASTER" if diff < -band else "SAME"
            if v.verdict == "SAME" and abs(diff) > tolerance * v.base_ms:
                v.why = "inside the combined noise"
    order = {name: i for i, name in enumerate(VERDICTS)}
    return sorted(out, key=lambda v: order[v.verdict])


def gated(verdicts: list[Verdict], allow_missing: bool = False) -> bool:
    gating = GATING - {"MISSING"} if allow_missing else GATING
    return any(v.verdict in gating for v in verdicts)


def _bad_stats(row, side: str) -> str | None:
    """Why a PASS row's statistics cannot be compared, or None: the median must be a positive
    finite number and the IQR a finite number >= 0."""
    median, iqr = _number(row["median_ms"]), _number(row["iqr_ms"])
    if median is None or not (math.isfinite(median) and median > 0):
        return f"{side} median_ms {row['median_ms']!s} is not a positive finite number"
    if iqr is None or not (math.isfinite(iqr) and iqr >= 0):
        return f"{side} iqr_ms {row['iqr_ms']!s} is not a finite number >= 0"
    return None


def _failure(row) -> str:
    if row["status"] == "ERROR":
        return str(row.get("error") or "") if not pd.isna(row.get("error")) else "the kernel failed"
    rel, rtol = _number(row.get("rel_err")), _number(row.get("rtol"))
    if rel is None or rtol is None:
        return "failed verification"
    return f"rel_err {rel:.2e} > rtol {rtol:g}"


def _number(x) -> float | None:
    try:
        return None if x is None or (not isinstance(x, str) and pd.isna(x)) else float(x)
    except (TypeError, ValueError):
        return None
