"""Regression verdicts: a current result CSV against a baseline, case by case, aware of noise.

A case is the same case on both sides when suite, variant, params, shape and hot/cold agree
(`results.case_key_of`). Where a CSV holds a case twice (a resumed sweep), the last row counts.

  SLOWER   current median - baseline median > max(tolerance x baseline, combined noise)
  FASTER   the same, the other way
  SAME     inside that band: a difference inside the combined noise is SAME even above the
           tolerance, because it would not repeat
  FAILED   the current run failed verification (FAIL) or the kernel failed (ERROR)
  MISSING  in the baseline, not in the current run
  NEW      in the current run only, or the baseline has no valid time for it
  SKIPPED  either side could not run it on its device

Combined noise is the mean of the two interquartile ranges: each side's IQR is how far apart
its own middle half of samples lie, so two medians closer than that cannot be told apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from nnbench import results
from nnbench.errors import NnbenchError

VERDICTS = ("SLOWER", "FAILED", "MISSING", "NEW", "SKIPPED", "FASTER", "SAME")
GATING = {"SLOWER", "FAILED"}
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
    """A result CSV, one row per case (the last one wins), indexed by case key."""
    try:
        df = pd.read_csv(path, dtype={"params": str, "error": str}, keep_default_na=False, na_values=[""])
    except FileNotFoundError:
        raise NnbenchError(f"{path}: no such result file") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise NnbenchError(f"{path}: not a result CSV ({type(e).__name__})") from None
    missing = [c for c in NEEDED if c not in df.columns]
    if missing:
        raise NnbenchError(f"{path}: not an nnbench result CSV; missing columns: {', '.join(missing)}")
    if "step" not in df.columns:
        df["step"] = ""
    ident = ["suite", "variant", "step", "params", "shape", "cold"]
    df[ident] = df[ident].fillna("").astype(str)
    df["step"] = [s[:-2] if s.endswith(".0") else s for s in df["step"]]  # pandas reads 3 as 3.0
    df["key"] = [results.case_key_of(dict(zip(ident, row))) for row in df[ident].itertuples(index=False)]
    return df.drop_duplicates("key", keep="last").set_index("key")


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
        b_ok = b is not None and b["status"] == "PASS" and _num(b["median_ms"])
        if b_ok:
            v.base_ms = float(b["median_ms"])
        if c is not None and c["status"] in ("PASS", "FAIL") and _num(c["median_ms"]):
            v.cur_ms = float(c["median_ms"])
        if c is None:
            v.verdict, v.why = "MISSING", "not in the current run"
        elif c["status"] in results.FAILED:
            v.verdict = "FAILED"
            v.why = str(c.get("error") or "") if c["status"] == "ERROR" else \
                f"rel_err {float(c['rel_err']):.2e} > rtol {float(c['rtol']):g}"
        elif c["status"] == "SKIP" or (b is not None and b["status"] == "SKIP"):
            v.verdict, v.why = "SKIPPED", str((c if c["status"] == "SKIP" else b).get("error") or "")
        elif not b_ok:
            v.verdict = "NEW"
            v.why = "not in the baseline" if b is None else "the baseline has no valid time"
        else:
            v.noise_ms = 0.5 * (_f(b["iqr_ms"]) + _f(c["iqr_ms"]))
            band = max(tolerance * v.base_ms, v.noise_ms)
            diff = v.cur_ms - v.base_ms
            v.verdict = "SLOWER" if diff > band else "FASTER" if diff < -band else "SAME"
            if v.verdict == "SAME" and abs(diff) > tolerance * v.base_ms:
                v.why = "inside the combined noise"
    order = {name: i for i, name in enumerate(VERDICTS)}
    return sorted(out, key=lambda v: order[v.verdict])


def gated(verdicts: list[Verdict]) -> bool:
    return any(v.verdict in GATING for v in verdicts)


def _num(x) -> bool:
    try:
        return float(x) > 0
    except (TypeError, ValueError):
        return False


def _f(x) -> float:
    try:
        v = float(x)
        return v if v == v else 0.0
    except (TypeError, ValueError):
        return 0.0
