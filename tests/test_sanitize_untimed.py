"""A sanitized case's process (nnbench/sanitize.py's child) skips the defenses judged from time, hidden-work and
roofline (audit.UNTIMED): compute-sanitizer's own work between and after the instrumented launches is not the
kernel's. The defenses judged from the answer stay in force there, and outside that mode the time-based ones
flag as always."""

from __future__ import annotations

from nnbench import audit, harness, measure, sanitize
from nnbench.workloads.gemm import session as gemm
from tests.test_sanitize import KernelRunningCpu

# The step-9 row that racecheck made SUSPECT: the device busy 8.91 ms after a 0.5 ms last batch
BUSY_AFTER = measure.Stats(median_ms=0.5, iqr_ms=0.0, q1_ms=0.5, q3_ms=0.5, min_ms=0.5, mean_ms=0.5, samples=1,
                           reps=1, noise=0.0, converged=False, last_batch_ms=0.5, settle_ms=8.91)


def _findings(stats: measure.Stats) -> list[tuple[str, str | None]]:
    # 2 TFLOP in its 0.5 ms is 4 PFLOP/s against a peak of 60 TFLOP/s
    return audit.timed_findings(stats) + [
        (audit.ROOFLINE, audit.roofline(2e12, 0.0, stats.median_ms * 1e-3, 60e12, None, None))]


def test_a_sanitized_child_skips_hidden_work_and_roofline_and_nothing_else(monkeypatch):
    monkeypatch.setattr(audit, "UNTIMED", [False])
    flagged = audit.judge({"status": "PASS"}, _findings(BUSY_AFTER))
    assert flagged["status"] == "SUSPECT"
    assert "hidden-work: the device was busy 8.91 ms" in flagged["error"] and "roofline: " in flagged["error"]
    monkeypatch.setattr(audit, "UNTIMED", [True])
    assert audit.judge({"status": "PASS"}, _findings(BUSY_AFTER)) == {"status": "PASS"}
    poisoned = measure.Stats(**dict(vars(BUSY_AFTER), last_failure="the output still holds the poison"))
    caught = audit.judge({"status": "PASS"}, _findings(poisoned))
    assert caught == {"status": "FAIL", "error": "timed-output: the output still holds the poison"}
    assert all(audit.enabled(d) for d in set(audit.DEFENSES) - audit.SUSPECTING)


def _gemm_row(monkeypatch, tmp_path, child: int | None) -> dict:
    monkeypatch.setitem(sanitize.MODE, "child", child)
    monkeypatch.setenv(sanitize.RECORD_ENV, str(tmp_path / "child.json"))
    rows = list(harness.run(gemm.WORKLOAD, KernelRunningCpu(), gemm.plan(["numpy"], {}, None, "cpu"),
                            [gemm.Shape(8, 8, 8)], measure.TimingSettings(budget_s=0.01), None, seed=1))
    return next(r for r in rows if r["variant"] == "numpy")


def test_the_harness_runs_a_sanitized_child_untimed_and_any_other_run_timed(tmp_path, monkeypatch):
    # any wait after the last batch is hidden work, so the CPU's own synchronize is flagged where it is judged
    monkeypatch.setattr(audit, "HIDDEN_MS", -1.0)
    monkeypatch.setattr(audit, "HIDDEN_SHARE", 0.0)
    monkeypatch.setattr(audit, "UNTIMED", [False])
    row = _gemm_row(monkeypatch, tmp_path, None)
    assert row["status"] == "SUSPECT" and row["error"].startswith("hidden-work: the device was busy")
    row = _gemm_row(monkeypatch, tmp_path, 0)
    assert row["status"] == "PASS" and not row.get("error")
    row = _gemm_row(monkeypatch, tmp_path, None)  # a run after a child's is judged as always
    assert row["status"] == "SUSPECT"
