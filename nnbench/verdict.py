"""Regression verdicts: a current result file against a baseline, case by case, on raw samples.

A case is the same case on both sides when workload, variant, params, shape and hot/cold agree
(`results.case_key_of`). Where a file holds a case twice (a resumed sweep, a retried ERROR), the
last row counts, and the file's `notes` say how many cases had more than one row. Either side may
be a result CSV or a `--json` results file (nnbench/rawresults.py).

Where both sides carry their raw samples (`compare_samples`; r = current median / baseline median):
  AMBIGUOUS  a side has fewer than MIN_SAMPLES samples: too short to decide
  SLOWER     r > 1 + tolerance, and a one-sided Mann-Whitney U test (scipy.stats.mannwhitneyu) on
             the raw samples says the current samples are larger, p < ALPHA; or, where the sides are
             too short for any outcome of the test to reach ALPHA (its floor is 1 / C(m + n, m): 5
             against 5 samples can give no p below 0.004), every current sample is above every
             baseline sample, the strongest evidence such samples can hold (a per-sample trainer's
             five timed launches in configs/ci.yaml)
  FASTER     r < 1 - tolerance, and the test says they are smaller, p < ALPHA
  UNSTABLE   r is beyond the tolerance but the test cannot tell it from noise (p >= ALPHA), or r is
             inside it but the medians are too uncertain to say so: the distribution-free 99%
             confidence intervals of the two medians (order statistics at binomial ranks; with fewer than 8 samples no
             99% interval exists, and the verdict gives [min, max] with its own coverage), combined, are
             wider than the tolerance; or a side
             ran under a power or thermal limit throughout (`throttle` names one, nothing was dropped) and
             the limit could explain the verdict: a limit only slows, so a capped current run that is
             not SLOWER, or a capped baseline that the current run is SLOWER than, keeps its verdict
  SAME       r inside the tolerance, with medians known well enough to say so
The tolerance is the smallest change that matters (an effect size); the test says whether a change
of that size is real. The rank test sees only the spread inside each run; on the H100, identical runs
of one process moved a case's median by up to 4.6% between runs while its samples spread by 0.04%
inside each (lab/journal/measurement.md). Where the between-run spread of a case is known (a
baseline of several runs, `load_baseline`, or the history database: its relative standard deviation
over those runs, `run_spread`), the tolerance is raised to RUN_SPREAD_K times it for that case. A
noisy run can no longer hide a regression as SAME: it is UNSTABLE, which fails the gate unless
`allow_unstable`.

Where a side has no raw samples (a CSV written before they were kept), today's rule stands, and
the verdict's `method` says so ("iqr"):
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

The gate fails on SLOWER, FAILED, INVALID, MISSING (allowed with `allow_missing`) and UNSTABLE or
AMBIGUOUS (allowed with `allow_unstable`): a current file with no rows, or with a case that never
ran, must not pass.

Combined noise is the mean of the two interquartile ranges: each side's IQR is how far apart
its own middle half of samples lie, so two medians closer than that cannot be told apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from nnbench import results
from nnbench.errors import NnbenchError
from nnbench.runtime.nvml import THROTTLE_NAMES

VERDICTS = ("SLOWER", "UNSTABLE", "AMBIGUOUS", "FAILED", "INVALID", "MISSING", "NEW", "SKIPPED", "FASTER", "SAME")
GATING = {"SLOWER", "FAILED", "INVALID", "MISSING", "UNSTABLE", "AMBIGUOUS"}
UNSURE = {"UNSTABLE", "AMBIGUOUS"}
NEEDED = ["workload", "variant", "params", "shape", "cold", "median_ms", "iqr_ms", "status"]
MIN_SAMPLES = 5  # per side; with fewer, not even complete separation is evidence (4 vs 4: p >= 0.014)
ALPHA = 0.001  # the rank test's level: with ~60 cases a run, about one case in 17 runs would pass it by chance
CI_LEVEL = 0.99  # of each median's distribution-free confidence interval
# The gate's defaults, derived in lab/journal/measurement.md ("The gate's defaults") from identical H100 runs:
# - comparing two files, nothing says how far a case's median moves between identical runs (up to 4.7% on the
#   H100 in 804 comparisons, 0.1-3% standard deviation by case), so the tolerance must cover every case:
TWO_FILE_TOLERANCE = 0.05
# - against a history, each case's own between-run spread s is known and its tolerance is max(tolerance,
#   RUN_SPREAD_K x s): a floor of 2% is the effect size that counts, and K bounds the false alarms. A run
#   checked against a pooled history moves from it by about s x sqrt(1 + 1/n); for no false SLOWER in a
#   whole gate's 20 runs (56 cases: 1,120 one-sided tests) at 95% confidence, a normal deviation must stay
#   under z = 3.9; s estimated from n >= MIN_SPREAD_RUNS runs can be 24% low at one standard error, so
#   K = 3.9 x 1.24 ~ 5. Where the history holds fewer runs, s is taken to be at least UNKNOWN_RUN_SPREAD,
#   which makes the tolerance the two-file one (5 x 1% = 5%).
HISTORY_TOLERANCE = 0.02
RUN_SPREAD_K = 5.0
MIN_SPREAD_RUNS = 10
UNKNOWN_RUN_SPREAD = TWO_FILE_TOLERANCE / RUN_SPREAD_K


@dataclass
class SampleComparison:
    """`compare_samples`'s answer for one case."""

    verdict: str  # SLOWER, FASTER, SAME, UNSTABLE or AMBIGUOUS
    ratio: float  # current median / baseline median (nan when a side is empty)
    p_value: float | None  # the one-sided rank test's p in the direction of the change
    uncertainty: float | None  # combined relative half-width of the two medians' confidence intervals
    why: str = ""


def run_spread_of(medians) -> float | None:
    """A case's between-run spread for the gate: the relative standard deviation of its runs' medians, and at
    least UNKNOWN_RUN_SPREAD where fewer than MIN_SPREAD_RUNS runs say it (module constants); None for one run."""
    m = np.asarray(medians, dtype=np.float64)
    if m.size < 2:
        return None
    s = float(np.std(m, ddof=1) / np.mean(m))
    return s if m.size >= MIN_SPREAD_RUNS else max(s, UNKNOWN_RUN_SPREAD)


def compare_samples(base, new, tolerance: float, alpha: float = ALPHA,
                    run_spread: float | None = None) -> SampleComparison:
    """The verdict on two sets of raw samples of one case (module docstring): the tolerance is the
    smallest relative change of the median that counts, the Mann-Whitney U test whether it is real.
    `run_spread`, where known, is the relative standard deviation of the case's median between runs
    (from history); the tolerance is then at least RUN_SPREAD_K times it."""
    from scipy.stats import mannwhitneyu
    if run_spread is not None and math.isfinite(run_spread):
        tolerance = max(tolerance, RUN_SPREAD_K * run_spread)
    b = np.asarray(base, dtype=np.float64)
    c = np.asarray(new, dtype=np.float64)
    b, c = b[np.isfinite(b)], c[np.isfinite(c)]
    if min(b.size, c.size) < MIN_SAMPLES:
        ratio = float(np.median(c) / np.median(b)) if b.size and c.size else math.nan
        return SampleComparison("AMBIGUOUS", ratio, None, None,
                                f"too few samples to decide ({b.size} baseline, {c.size} current; "
                                f"needs {MIN_SAMPLES} each)")
    mb, mc = float(np.median(b)), float(np.median(c))
    ratio = mc / mb
    (hb, cov_b), (hc, cov_c) = _median_halfwidth(b), _median_halfwidth(c)
    u = math.hypot(hb, hc)
    if ratio > 1 + tolerance or ratio < 1 - tolerance:
        slower = ratio > 1
        p = float(mannwhitneyu(c, b, alternative="greater" if slower else "less").pvalue)
        word = "slower" if slower else "faster"
        if p < alpha:
            return SampleComparison("SLOWER" if slower else "FASTER", ratio, p, u,
                                    f"{100 * abs(ratio - 1):.1f}% {word}, rank test p={p:.1g}")
        floor = 1 / math.comb(b.size + c.size, b.size)
        separated = c.min() > b.max() if slower else c.max() < b.min()
        if floor >= alpha and separated:
            return SampleComparison("SLOWER" if slower else "FASTER", ratio, p, u,
                                    f"{100 * abs(ratio - 1):.1f}% {word}, every sample beyond every baseline "
                                    f"sample ({b.size} and {c.size} samples: the rank test's floor is p={floor:.1g})")
        return SampleComparison("UNSTABLE", ratio, p, u,
                                f"{100 * abs(ratio - 1):.1f}% {word} by the medians, but the rank test cannot "
                                f"tell it from noise (p={p:.2g} >= {alpha:g})")
    # With too few samples for a CI_LEVEL interval, [min, max] is the widest there is: the verdict rests on it
    # and says at what coverage, instead of calling it a CI_LEVEL interval.
    coverage = min(cov_b, cov_c)
    short = "" if coverage >= CI_LEVEL else (
        f" (too few samples for a {100 * CI_LEVEL:g}% interval of the median: {b.size} and {c.size} samples "
        f"give [min, max], {100 * coverage:.1f}% coverage)")
    if u > tolerance:
        return SampleComparison("UNSTABLE", ratio, None, u,
                                f"too noisy to resolve {100 * tolerance:g}%: the medians are known only to "
                                f"±{100 * u:.1f}%{short}")
    return SampleComparison("SAME", ratio, None, u, short.strip(" ()"))


def median_interval(x, level: float = CI_LEVEL) -> tuple[float, float, float]:
    """(low, high, coverage): the distribution-free confidence interval of the median of samples `x`, the
    order statistics x_(k+1) and x_(n-k) (1-based), which hold the median with probability
    1 - 2 P(B <= k) for B ~ Binomial(n, 1/2), whatever the samples' distribution. k is the largest with that
    coverage at least `level`. Where none reaches it (n < 8 at 99%: [min, max] covers 1 - 2^(1-n), 93.8% for
    5 samples, 98.4% for 7), the answer is [min, max] with the coverage it has, never claimed as `level`."""
    from scipy.stats import binom
    x = np.sort(np.asarray(x, dtype=np.float64))
    n = x.size
    k = int(binom.ppf((1 - level) / 2, n, 0.5))  # the smallest k with P(B <= k) >= (1 - level) / 2
    while k >= 0 and binom.cdf(k, n, 0.5) > (1 - level) / 2:
        k -= 1
    k = max(k, 0)  # none reaches the level: the widest interval, with its own coverage
    return float(x[k]), float(x[n - 1 - k]), float(1 - 2 * binom.cdf(k, n, 0.5))


def _median_halfwidth(x: np.ndarray) -> tuple[float, float]:
    """(half-width, coverage): half the width of the median's distribution-free interval (`median_interval`),
    relative to the median, and the coverage that interval has."""
    lo, hi, coverage = median_interval(x)
    med = float(np.median(x))
    return ((hi - lo) / (2 * med) if med > 0 else math.inf), coverage


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
    workload: str = ""
    method: str = ""  # "rank": compare_samples on raw samples; "iqr": the older rule, a side had none
    p_value: float | None = None
    base_n: int | None = None
    cur_n: int | None = None

    @property
    def change(self) -> float | None:
        return self.cur_ms / self.base_ms - 1 if self.base_ms and self.cur_ms else None


def load(path: Path) -> pd.DataFrame:
    """A result CSV or JSON results file, one row per case (the last one wins), indexed by case key,
    with its raw samples in `samples_ms` where the file has them. `df.attrs["notes"]` lists what was
    set aside: rows without a valid status (cut short), cases with several rows."""
    from nnbench import rawresults
    notes = []
    if rawresults.is_json(path):
        recs = rawresults.load(path, notes, times=False)  # a damaged median is the case's INVALID verdict
        if not recs:
            raise NnbenchError(f"{path}: no records")
        df = pd.DataFrame([{k: ("" if v is None else v) for k, v in r.fields.items()} for r in recs])
        df["samples_ms"] = [r.samples_ms for r in recs]
    else:
        df = results.read_csv(path, times=False, dtype=str, keep_default_na=False, na_values=[""])
        if df.empty:
            notes.append(f"{path}: has a header but no rows (a run stopped before its first); no cases from it")
    missing = [c for c in NEEDED if c not in df.columns]
    if missing:
        raise NnbenchError(f"{path}: not an nnbench result file; missing columns: {', '.join(missing)}")
    if "sanitizer" in df.columns:
        results.refuse_sanitized(path, df["sanitizer"].fillna(""), "the gate")
    valid = df["status"].isin(results.STATUSES)
    if not valid.all():
        notes.append(f"{path}: {(~valid).sum()} rows without a valid status (cut short?) were set aside")
        df = df[valid]
    if "step" not in df.columns:
        df["step"] = ""
    ident = ["workload", "variant", "step", "params", "shape", "cold"]
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


def pooled(medians, iqrs, samples: list, run_medians=None) -> dict:
    """One baseline row's statistics from several runs of a case: the median of their medians, an IQR that is the
    larger of the runs' own (their median) and the spread of their medians, every raw sample pooled (None where a
    run has none), and the case's between-run spread (run_spread_of over `run_medians`, default `medians`), which
    compare_samples turns into the case's own tolerance. Serves a baseline of several files (load_baseline) and
    the history's last stable segment (nnbench/history/gate.py)."""
    m = np.asarray(medians, dtype=np.float64)
    q1, q3 = np.percentile(m, [25, 75])
    own = np.asarray([x for x in iqrs if x is not None and np.isfinite(x)], dtype=np.float64)
    return dict(median_ms=str(float(np.median(m))), iqr_ms=str(max(float(q3 - q1), float(np.median(own)) if own.size
                                                                  else 0.0)),
                samples_ms=np.concatenate([np.asarray(x, dtype=np.float64) for x in samples])
                if samples and all(x is not None for x in samples) else None,
                run_spread=run_spread_of(m if run_medians is None else run_medians), runs=len(m))


def baseline_files(paths) -> list[Path]:
    """The files a baseline names: each path a result file, or a folder whose *.csv and *.json files are
    one run each (a baseline made of several runs)."""
    out: list[Path] = []
    for p in [Path(x) for x in ([paths] if isinstance(paths, (str, Path)) else paths)]:
        if p.is_dir():
            found = sorted([*p.glob("*.csv"), *p.glob("*.json"), *p.glob("*.jsonl")])
            if not found:
                raise NnbenchError(f"{p}: a baseline folder with no result files (*.csv, *.json) in it")
            out += found
        else:
            out.append(p)
    return out


def load_baseline(paths) -> pd.DataFrame:
    """The gate's baseline: one result file as `load` reads it, or several runs of the same cases (files, or a
    folder of them), pooled per case (`pooled`): each case then carries its between-run spread (`run_spread`),
    and the rank test's tolerance for it is at least RUN_SPREAD_K times that spread, as against the history.
    One run cannot say how far a case moves between processes (a 16 us convolution moved 10% between two
    identical runs on the H100 while its samples spread 1% inside each), several can."""
    files = baseline_files(paths)
    runs = [load(f) for f in files]
    if len(runs) == 1:
        return runs[0]
    found = set().union(*(gpus(r) for r in runs))
    if len(found) > 1:
        raise NnbenchError(f"the baseline's runs come from several GPUs ({', '.join(sorted(found))}); a baseline "
                           "of several runs must come from one")
    rows, capped = {}, 0
    for key in dict.fromkeys(k for r in runs for k in r.index):
        have = [r.loc[key] for r in runs if key in r.index]
        ok = [row for row in have if row["status"] in results.TIMED and not _bad_stats(row, "")]
        if len(ok) < len(have) or len(ok) < 2:  # a failed, skipped or lone row decides the case as it is
            rows[key] = dict(next((row for row in have if row["status"] in results.FAILED), have[-1]))
            continue
        # A run of the case that ran throttled throughout is not the kernel's own speed: it is left out of the pool,
        # which then speaks for the runs that were not (the pooled row used to carry the last run's throttle, and
        # one capped run of ten made every later check of the case UNSTABLE: session 7, lab/journal/measurement.md).
        # Where fewer than two runs were free of it, the pool is all of them, its row a throttled run's (so marked).
        held = [bool(_throttled_throughout(row, "")) for row in ok]
        free = [row for row, h in zip(ok, held) if not h]
        if len(free) >= 2:
            capped += any(held)
            ok = free
        else:
            ok = free + [row for row, h in zip(ok, held) if h]
        rows[key] = dict(ok[-1], **pooled([float(row["median_ms"]) for row in ok],
                                          [_number(row["iqr_ms"]) for row in ok], [samples_of(row) for row in ok]))
    out = pd.DataFrame.from_dict(rows, orient="index")
    out.attrs["notes"] = [n for r in runs for n in r.attrs.get("notes", [])] + [
        f"{capped} case{'s' if capped != 1 else ''} left out a baseline run that ran throttled throughout"] * (
        capped > 0) + [
        f"the baseline pools {len(runs)} runs ({files[0].parent}): each case's tolerance is at least "
        f"{RUN_SPREAD_K:g} x its between-run spread (at least {100 * UNKNOWN_RUN_SPREAD:g}% where fewer than "
        f"{MIN_SPREAD_RUNS} runs say it)"]
    out.attrs["runs"] = len(runs)
    return out


def default_tolerance(several_runs: bool) -> float:
    """--tolerance's default: where each case's between-run spread is known (a baseline of several runs, the
    history) the smallest change that counts, HISTORY_TOLERANCE, raised per case; else TWO_FILE_TOLERANCE."""
    return HISTORY_TOLERANCE if several_runs else TWO_FILE_TOLERANCE


def gpus(df: pd.DataFrame) -> set[str]:
    return set(df["gpu"].dropna().astype(str)) if "gpu" in df.columns else set()


def samples_of(row) -> np.ndarray | None:
    """A row's raw samples, from a JSON file (an array) or a CSV's `samples_ms` cell (text)."""
    if row is None or "samples_ms" not in row.index:
        return None
    v = row["samples_ms"]
    if isinstance(v, np.ndarray):
        return v if v.size else None
    got = results.parse_samples(v)
    return np.asarray(got, dtype=np.float64) if got else None


def compare(base: pd.DataFrame, cur: pd.DataFrame, tolerance: float, alpha: float = ALPHA) -> list[Verdict]:
    out = []
    for key in list(base.index) + [k for k in cur.index if k not in base.index]:
        b = base.loc[key] if key in base.index else None
        c = cur.loc[key] if key in cur.index else None
        ref = c if c is not None else b
        v = Verdict(str(ref["variant"]), str(ref["params"]), str(ref["shape"]), "", workload=str(ref["workload"]))
        out.append(v)
        b_bad = _bad_stats(b, "the baseline's") if b is not None and b["status"] in results.TIMED else None
        c_bad = _bad_stats(c, "the current") if c is not None and c["status"] in results.TIMED else None
        # The reference's time (no kernel ran) is compared with the reference's only, never with a kernel's.
        crossed = b is not None and c is not None and (b["status"] == results.REFERENCE) != (
            c["status"] == results.REFERENCE) and not ({b["status"], c["status"]} & (results.FAILED | {"SKIP"}))
        if b is not None and b["status"] in results.TIMED and not b_bad and not crossed:
            v.base_ms = float(b["median_ms"])
        if c is not None and c["status"] in results.TIMED and not c_bad and not crossed:
            v.cur_ms = float(c["median_ms"])
        if crossed:
            side = "baseline" if b["status"] == results.REFERENCE else "current run"
            v.verdict, v.why = "INVALID", (f"the {side}'s row timed the reference, not the kernel (no GPU): the two "
                                           "are not comparable")
        elif c is None:
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
        elif (sb := samples_of(b)) is not None and (sc := samples_of(c)) is not None:
            v.noise_ms = 0.5 * (float(b["iqr_ms"]) + float(c["iqr_ms"]))
            found = compare_samples(sb, sc, tolerance, alpha, run_spread=_number(b.get("run_spread")))
            v.verdict, v.why, v.method, v.p_value = found.verdict, found.why, "rank", found.p_value
            v.base_n, v.cur_n = sb.size, sc.size
            # the raw samples' medians (the files' median_ms agree up to the CSV's 6 digits)
            v.base_ms, v.cur_ms = float(np.median(sb)), float(np.median(sc))
        else:
            v.method = "iqr"
            v.noise_ms = 0.5 * (float(b["iqr_ms"]) + float(c["iqr_ms"]))
            band = max(tolerance * v.base_ms, v.noise_ms)
            diff = v.cur_ms - v.base_ms
            v.verdict = "SLOWER" if diff > band else "FASTER" if diff < -band else "SAME"
            if v.verdict == "SAME" and abs(diff) > tolerance * v.base_ms:
                v.why = "inside the combined noise"
        if v.verdict in ("SAME", "SLOWER", "FASTER", "UNSTABLE"):
            _weigh_throttle(v, b, c)
    order = {name: i for i, name in enumerate(VERDICTS)}
    return sorted(out, key=lambda v: order[v.verdict])


def gated(verdicts: list[Verdict], allow_missing: bool = False, allow_unstable: bool = False) -> bool:
    gating = GATING - ({"MISSING"} if allow_missing else set()) - (UNSURE if allow_unstable else set())
    return any(v.verdict in gating for v in verdicts)


def geomean_change(verdicts: list[Verdict]) -> dict[str, tuple[float, int]]:
    """Per workload: the geometric mean of current / baseline medians over the cases measured on both
    sides, as a relative change (+0.02 is 2% slower), and how many cases it covers."""
    logs: dict[str, list[float]] = {}
    for v in verdicts:
        if v.base_ms and v.cur_ms and v.base_ms > 0 and v.cur_ms > 0:
            logs.setdefault(v.workload, []).append(math.log(v.cur_ms / v.base_ms))
    return {workload: (math.exp(sum(x) / len(x)) - 1, len(x)) for workload, x in logs.items()}


def test_label(v: Verdict) -> str:
    """How a verdict was decided, for tables: the rank test (samples per side, p) or the IQR rule."""
    if v.method == "rank":
        return f"rank {v.base_n}/{v.cur_n}" + (f" p={v.p_value:.1g}" if v.p_value is not None else "")
    if v.method == "iqr":
        return f"IQR ±{v.noise_ms:.4f}" if v.noise_ms is not None else "IQR"
    return ""


def methods_note(verdicts: list[Verdict]) -> str | None:
    """A line saying how many cases fell back to the IQR rule (a side without raw samples), or None."""
    n = sum(v.method == "iqr" for v in verdicts)
    if not n:
        return None
    return (f"{n} of {sum(bool(v.method) for v in verdicts)} cases were compared by the older IQR rule: a side has no "
            "raw samples (a file from before nnbench kept them); re-make the baseline to test them on samples")


def _weigh_throttle(v: Verdict, b, c) -> None:
    """A side that ran under a power or thermal limit throughout is not the kernel's own speed, but a limit only
    ever slows a kernel: a capped current run that is still not SLOWER shows no regression (its verdict stands,
    saying so), and a capped baseline that the current run is SLOWER than still saw a regression. The other cases
    cannot be told from the throttle: UNSTABLE, saying why. On the H100 (session 7) the power-cap flag held all of
    a case's batches in 5 of 43 fresh runs of configs/ci.yaml, 7 cases: 6 within 1% of the baseline at SM clocks
    of 1,620-1,965 MHz (UNSTABLE then, failing the gate), and one at 1,590-1,770 MHz, +10.9%."""
    base, cur = _throttled_throughout(b, "the baseline"), _throttled_throughout(c, "the current run")
    if base and cur:
        v.verdict, v.why = "UNSTABLE", f"{base}{NOT_OWN_SPEED}; {cur}{NOT_OWN_SPEED}"
    elif cur and v.verdict in ("SAME", "FASTER"):
        v.why = "; ".join(x for x in (v.why, f"{cur}, and not slower for it") if x)
    elif cur or (base and v.verdict != "SLOWER"):
        v.verdict, v.why = "UNSTABLE", f"{base or cur}{NOT_OWN_SPEED}"


NOT_OWN_SPEED = ": not the kernel's own speed"


def _throttled_throughout(row, side: str) -> str | None:
    """How a side ran throttled throughout (`side`, the limits and the clocks), or None: a power or thermal limit
    held the clocks
    and no sample was dropped for it, so every kept sample ran throttled (measure keeps them only where the GPU
    was throttled for twice the budget, or with --keep-throttled). On the H100 such a run of an unchanged
    kernel read 6.3% slower at an SM clock of 1,635-1,860 MHz against 1,980 (lab/journal/measurement.md)."""
    reasons = str(row.get("throttle") or "")  # a result row, or a record's fields (a NaN reads "nan": none)
    held = [r for r in reasons.split("|") if r in THROTTLE_NAMES]
    if not held or (_number(row.get("dropped")) or 0) > 0:
        return None
    low, mid = _number(row.get("sm_clock_min_mhz")), _number(row.get("sm_clock_mhz"))
    clocks = f", SM clock {low:,.0f}-{mid:,.0f} MHz" if low and mid else ""
    return f"{side} ran throttled throughout ({', '.join(held)}{clocks})"


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
    error = row.get("error")
    if row["status"] == "SUSPECT" or rel is None or rtol is None or rel <= rtol:  # a defense's (nnbench/audit.py)
        return f"{row['status']}: {error}" if isinstance(error, str) and error else "failed verification"
    return f"rel_err {rel:.2e} > rtol {rtol:g}"


def _number(x) -> float | None:
    try:
        return None if x is None or (not isinstance(x, str) and pd.isna(x)) else float(x)
    except (TypeError, ValueError):
        return None
