"""--sanitize-jobs N (nnbench/sanitize.py, in_order): up to N cases' processes under a stand-in compute-sanitizer
at once, their rows still in the cases' order, each with its own report; bad input is one line naming the option."""

from __future__ import annotations

import csv
import os
import stat
import sys

import pytest
from click.testing import CliRunner

from nnbench import sanitize
from nnbench.cli import cli
from tests.test_sanitize import CLEAN, SWEEP, one_line

CASES = 6  # SWEEP's plan: 3 cases x 2 shapes


def slow_sanitizer(tmp_path, monkeypatch):
    """A compute-sanitizer whose K-th case takes longer the earlier it is in the plan (so later cases end first),
    notes when it ran, reports a race in the odd cases with K in its line, and hands back a record holding K."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "compute-sanitizer"
    script.write_text(f"""#!{sys.executable}
import json, os, sys, time
args = sys.argv[1:]
k = int(args[-1])
start = time.monotonic()
with open({str(tmp_path / 'calls')!r}, 'a') as calls:
    calls.write(' '.join(args) + '\\n')
time.sleep(0.1 * ({CASES} - k))
log = {CLEAN!r}
if k % 2:
    log = '========= Error: Race reported in case ' + str(k) + '\\n' + log
open(args[args.index('--log-file') + 1], 'w').write(log)
open(os.environ['{sanitize.RECORD_ENV}'], 'w').write(json.dumps({{"status": "PASS", "rel_err": k}}))
with open({str(tmp_path / 'spans')!r}, 'a') as spans:
    spans.write(f'{{start}} {{time.monotonic()}}\\n')
sys.exit({sanitize.HAZARD_EXIT} if k % 2 else 0)
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def most_at_once(tmp_path) -> int:
    spans = [tuple(map(float, line.split())) for line in (tmp_path / "spans").read_text().splitlines()]
    return max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)


def tiny_config(tmp_path):
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(SWEEP)
    return cfg


@pytest.mark.parametrize("jobs", [1, 3])
def test_cases_run_at_once_and_their_rows_keep_the_plans_order(jobs, tmp_path, monkeypatch):
    from nnbench.sweeps import config, sanitized
    cfg = tiny_config(tmp_path)
    specs = config.load_config(str(cfg))
    slow_sanitizer(tmp_path, monkeypatch)
    rows = list(sanitized.parent(specs, "racecheck", ["sweep", str(cfg)], jobs))
    planned = sanitized.plan(specs, "cuda")
    assert [(r["variant"], r["params"], r["shape"]) for r in rows] == \
        [(j.case.variant.name, j.case.param_label, j.shape.label) for _, j in planned]
    for k, r in enumerate(rows):  # each row is its own case's record and report
        assert r["rel_err"] == k
        if k % 2:
            assert r["status"] == "FAIL" and r["error"] == f"racecheck: Error: Race reported in case {k}"
        else:
            assert r["status"] == "PASS" and r["sanitizer"] == "sanitized: racecheck"
    assert most_at_once(tmp_path) == jobs


def test_a_reader_that_stops_early_starts_no_further_case(tmp_path, monkeypatch):
    from nnbench.sweeps import config, sanitized
    cfg = tiny_config(tmp_path)
    slow_sanitizer(tmp_path, monkeypatch)
    rows = sanitized.parent(config.load_config(str(cfg)), "racecheck", ["sweep", str(cfg)], 2)
    next(rows)
    rows.close()
    import time
    time.sleep(0.8)  # the case already running when the reader stopped may still end; no other starts after it
    assert len((tmp_path / "calls").read_text().splitlines()) < CASES


def test_the_sweep_command_runs_its_cases_at_once_and_keeps_its_own_options(tmp_path, monkeypatch):
    from nnbench.cli import app
    cfg = tiny_config(tmp_path)
    slow_sanitizer(tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(app, "worker_backend", lambda backend: "cuda")  # the parent launches nothing itself
    out = tmp_path / "sanitized.csv"
    res = CliRunner().invoke(cli, ["sweep", str(cfg), "--sanitize-jobs", "2", "--sanitize", "initcheck",
                                   "--out", str(out)])
    assert res.exit_code == 1, res.output  # the odd cases' races
    assert "3 of 6 cases clean under initcheck" in res.output
    calls = (tmp_path / "calls").read_text().splitlines()
    assert sorted(c.split()[-1] for c in calls) == [str(k) for k in range(CASES)]
    for c in calls:  # the child is the same command, less the parent's own options
        args = c.split()
        assert args[args.index("nnbench"):] == ["nnbench", "sweep", str(cfg), "--out", str(out),
                                                "--sanitize-child", args[-1]]
    with open(out) as f:
        assert [float(r["rel_err"]) for r in csv.DictReader(f)] == list(range(CASES))
    assert most_at_once(tmp_path) == 2


@pytest.mark.parametrize("command", [["gemm", "--size", "257"], ["conv"], ["train", "--net", "1"], ["sweep", "CFG"]])
def test_bad_jobs_are_one_line_naming_the_option(command, tmp_path, monkeypatch):
    slow_sanitizer(tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path)
    command = [str(tiny_config(tmp_path)) if a == "CFG" else a for a in command]
    line = one_line(CliRunner().invoke(cli, [*command, "--sanitize", "racecheck", "--sanitize-jobs", "0"]))
    assert "'--sanitize-jobs': 0 is not in the range x>=1" in line
    line = one_line(CliRunner().invoke(cli, [*command, "--sanitize-jobs", "two", "--sanitize", "racecheck"]))
    assert "'--sanitize-jobs': 'two' is not a valid integer" in line
    for alone in (["--sanitize-jobs", "2"], ["--sanitize-jobs=2", "--backend", "cpu"]):
        line = one_line(CliRunner().invoke(cli, [*command, *alone]))
        assert "'--sanitize-jobs': only with --sanitize TOOL" in line
    for order in (["--sanitize-jobs", "2", "--sanitize", "memcheck"], ["--sanitize", "memcheck", "--sanitize-jobs",
                                                                       "2"]):
        line = one_line(CliRunner().invoke(cli, [*command, *order, "--backend", "cpu"]))
        assert line.endswith("--sanitize: needs a GPU (this run is on the cpu backend)")  # the pair was accepted


def test_the_default_is_the_cores_at_most_eight(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert sanitize.default_jobs() == sanitize.MAX_DEFAULT_JOBS == 8
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert sanitize.default_jobs() == 2
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert sanitize.default_jobs() == 1


def test_gemm_conv_and_train_run_their_cases_at_once_in_the_harness(tmp_path, monkeypatch):
    from nnbench import harness, measure
    from nnbench.workloads.gemm import session as gemm
    from tests.test_sanitize import KernelRunningCpu
    shapes = [gemm.Shape(8, 8, 8), gemm.Shape(16, 16, 16), gemm.Shape(5, 3, 2), gemm.Shape(1, 1, 1)]
    slow_sanitizer(tmp_path, monkeypatch)
    monkeypatch.setitem(sanitize.MODE, "tool", "synccheck")
    monkeypatch.setitem(sanitize.MODE, "argv", ["gemm"])
    monkeypatch.setitem(sanitize.MODE, "jobs", 4)
    rows = list(harness.run(gemm.WORKLOAD, KernelRunningCpu(), gemm.plan([], {}, None, "cpu"), shapes,
                            measure.TimingSettings(budget_s=0.01), None, seed=1))
    assert [(r["shape"], r["rel_err"]) for r in rows] == [("8×8×8", 0), ("16×16×16", 1), ("5×3×2", 2), ("1×1×1", 3)]
    assert [r["status"] for r in rows] == ["PASS", "FAIL", "PASS", "FAIL"]
    assert most_at_once(tmp_path) == 4
