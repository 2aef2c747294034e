"""Regression verdicts on synthetic CSVs, and `nnbench check` through CliRunner."""

import csv

import numpy as np
import pytest
from click.testing import CliRunner

from nnbench import results, verdict
from nnbench.cli import cli


def row(variant, median, iqr=0.0, status="PASS", params="", shape="64×64×64", gpu="GPU-A", **kw):
    r = dict(workload="gemm", variant=variant, params=params, shape=shape, cold=False, median_ms=median, iqr_ms=iqr,
             status=status, gpu=gpu, rtol=5e-5, rel_err=1e-7)
    r.update(kw)
    return r


def write(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=results.FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in results.FIELDS})
    return path


BASE = [
    row("naive", 10.0, 0.1),
    row("tiled", 5.0, 0.05, params="TS=32"),
    row("coarsened", 2.0, 0.02, params="TS=32 WPT=8"),
    row("noisy", 1.0, 0.4),
    row("gone", 1.0),
    row("vectorized", 1.0),
    row("warptile", 1.0),
    row("cublas", 0.5, params="sgemm via cupy, TF32 off"),
]
CURRENT = [
    row("naive", 10.3, 0.1),  # +3%: inside the 5% tolerance
    row("tiled", 6.0, 0.05, params="TS=32"),  # +20%, far outside the noise: SLOWER
    row("coarsened", 1.5, 0.02, params="TS=32 WPT=8"),  # -25%: FASTER
    row("noisy", 1.3, 0.5),  # +30%, but the IQRs are wider than that: SAME
    row("vectorized", 1.0, status="FAIL", rel_err=3e-4),
    row("warptile", 1.0, status="ERROR", error="kernel fault: illegal address"),
    row("newcomer", 1.0),
    row("cublas", 0.5, params="sgemm via torch, TF32 off"),  # same case whichever library ran it
]


def verdicts(tmp_path, base=BASE, cur=CURRENT, tol=0.05):
    b = verdict.load(write(tmp_path / "b.csv", base))
    c = verdict.load(write(tmp_path / "c.csv", cur))
    return {v.variant: v for v in verdict.compare(b, c, tol)}


def test_each_verdict(tmp_path):
    v = verdicts(tmp_path)
    assert {k: x.verdict for k, x in v.items()} == {
        "naive": "SAME", "tiled": "SLOWER", "coarsened": "FASTER", "noisy": "SAME", "gone": "MISSING",
        "vectorized": "FAILED", "warptile": "FAILED", "newcomer": "NEW", "cublas": "SAME"}
    assert v["noisy"].why == "inside the combined noise"
    assert v["tiled"].change == pytest.approx(0.2)
    assert "rel_err 3.00e-04" in v["vectorized"].why and "illegal address" in v["warptile"].why
    assert verdict.gated(list(v.values()))


def test_tolerance_moves_the_line(tmp_path):
    assert verdicts(tmp_path, tol=0.25)["tiled"].verdict == "SAME"
    assert verdicts(tmp_path, tol=0.01)["naive"].verdict == "SLOWER"


def test_last_row_of_a_case_wins(tmp_path):
    cur = [row("naive", 20.0), row("naive", 10.0)]
    assert verdicts(tmp_path, base=[row("naive", 10.0)], cur=cur)["naive"].verdict == "SAME"


def test_cli_check_exit_codes(tmp_path):
    b, c = write(tmp_path / "b.csv", BASE), write(tmp_path / "c.csv", CURRENT)
    res = CliRunner().invoke(cli, ["check", str(b), str(c), "--tolerance", "5%"])
    assert res.exit_code == 1, res.output
    assert "SLOWER" in res.output and "regression gate: FAILED" in res.output
    ok = write(tmp_path / "ok.csv", BASE[:3])
    res = CliRunner().invoke(cli, ["check", str(ok), str(ok)])
    assert res.exit_code == 0 and "3 SAME" in res.output and "passed" in res.output


@pytest.mark.parametrize("args, needles", [
    (["check", "a.csv"], ["BASELINE.csv and CURRENT.csv"]),
    (["check", "{b}", "{other}"], ["from GPU-A", "GPU-B", "--any-gpu"]),
    (["check", "{b}", "{b}", "--tolerance", "lots"], ["--tolerance", "5%"]),
    (["check", "{b}", "{junk}"], ["missing columns"]),
    (["check", "{b}", "nope.csv"], ["nope.csv: no such file"]),
    (["check", "--run", "configs/ci.yaml", "--baseline", "nope.csv"], ["--baseline nope.csv: no such file"]),
    (["check", "{b}", "{b}", "--baseline", "{b}"], ["apply only with --run"]),
])
def test_cli_check_errors_are_one_line(tmp_path, args, needles):
    files = {"b": write(tmp_path / "b.csv", BASE), "other": write(tmp_path / "o.csv", [row("naive", 1, gpu="GPU-B")])}
    (tmp_path / "junk.csv").write_text("a,b\n1,2\n")
    files["junk"] = tmp_path / "junk.csv"
    res = CliRunner().invoke(cli, [a.format(**files) for a in args])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("nnbench: error:"), res.output
    for n in needles:
        assert n in lines[0], lines[0]


def test_a_case_is_its_variant_parameters_and_problem_not_its_display_text():
    """What the host did (after " · "), the order of the parameters and a parameter at its registry default
    (absent from files written before the parameter existed) are not part of a case's identity; a value is."""
    key = results.case_key
    base = key("gemm", "tf32_wgmma", "BM=128 BN=128 BK=32 STAGES=4 ADAPT=1 CLUSTER_M=1 PERSISTENT=0 SPLIT_K=0 "
               "PRECISION=1 · BN=64 here (B by cp.async, few tiles), TMA, cp.async B", "1000×777×1234", False)
    assert key("gemm", "tf32_wgmma", "STAGES=4 BM=128 BN=128 BK=32 PRECISION=1 · TMA, B via a padded copy",
               "1000×777×1234", False) == base
    assert key("gemm", "tf32_wgmma", "BM=128 BN=128 BK=32 STAGES=4 PERSISTENT=1 PRECISION=1", "1000×777×1234",
               False) != base
    assert key("gemm", "tf32_wgmma", "BM=128 BN=128 BK=32 STAGES=4 PRECISION=1", "1000×777×1234", True) != base
    # a user's kernel has no registry row: every parameter it names counts
    assert key("kernel", "mine", "BLOCK=256", "n=1", False) != key("kernel", "mine", "", "n=1", False)


def test_the_readme_showcase_compares_case_for_case():
    """The README's HTML report showcase: the H100 gate run against the committed baseline. The label text of
    step 9's rows changed between the two files; no case may split into MISSING and NEW for it."""
    root = results.paths.ROOT
    base = verdict.load(root / "results/baselines/nvidia-h100-80gb-hbm3.csv")
    cur = verdict.load(root / "docs/data/figures/ci_again.csv")
    got = verdict.compare(base, cur, verdict.TWO_FILE_TOLERANCE)
    split = [(v.verdict, v.variant, v.params) for v in got if v.verdict in ("MISSING", "NEW")]
    assert not split and len(got) == len(base) == len(cur)


@pytest.mark.parametrize("n", [5, 6, 7, 8, 9, 10, 20, 31, 100])
def test_the_median_interval_has_the_coverage_it_claims(n):
    """Coverage counted exactly: over every way the true median can fall among n samples (B samples below it,
    B ~ Binomial(n, 1/2)), the interval holds it as often as it says, and at least CI_LEVEL where it can."""
    from scipy.stats import binom
    x = np.arange(1.0, n + 1)
    lo, hi, coverage = verdict.median_interval(x)
    held = sum(binom.pmf(b, n, 0.5) for b in range(n + 1) if lo <= b + 0.5 <= hi)  # median between x_(b), x_(b+1)
    assert held == pytest.approx(coverage, abs=1e-12)
    if 1 - 2 * 0.5 ** n >= verdict.CI_LEVEL:
        assert coverage >= verdict.CI_LEVEL
        assert 1 - 2 * binom.cdf(x.searchsorted(lo) + 1, n, 0.5) < verdict.CI_LEVEL  # and it is the narrowest
    else:
        assert (lo, hi) == (1, n) and coverage < verdict.CI_LEVEL


def test_a_verdict_on_too_few_samples_for_the_interval_says_its_coverage():
    got = verdict.compare_samples([1.0, 1.01, 0.99, 1.0, 1.02], [1.0, 1.01, 0.99, 1.0, 1.02], 0.05)
    assert got.verdict == "SAME" and "93.8% coverage" in got.why and "99% interval" in got.why
    many = verdict.compare_samples(np.linspace(0.99, 1.01, 30), np.linspace(0.99, 1.01, 30), 0.05)
    assert many.verdict == "SAME" and many.why == ""


def test_the_references_time_is_compared_with_the_references_only(tmp_path):
    """A row the reference made (no kernel ran: status REFERENCE) is never a kernel's baseline or current time:
    against a kernel row of the same case it is INVALID; against the reference's own row it is compared."""
    ref = dict(workload="kernel", step="")
    base = [row("k", 1.0, 0.01, **ref), row("reference", 2.0, 0.01, status="REFERENCE", **ref)]
    cur = [row("k", 0.2, 0.01, status="REFERENCE", **ref), row("reference", 2.0, 0.01, status="REFERENCE", **ref)]
    v = verdicts(tmp_path, base, cur)
    assert v["k"].verdict == "INVALID" and "reference" in v["k"].why and v["k"].cur_ms is None
    assert v["reference"].verdict == "SAME" and v["reference"].cur_ms == 2.0
