"""--sanitize (nnbench/sanitize.py) with a stand-in compute-sanitizer on PATH: a hazard is FAIL with the first
report line, a clean run keeps the case's verdict and says it was sanitized, a case's process that dies without a
report is ERROR; without compute-sanitizer or without a GPU, one line and exit 2."""

from __future__ import annotations

import os
import stat
import sys

import pytest
from click.testing import CliRunner

from nnbench import sanitize
from nnbench.cli import cli

RACE = """========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at 0x1f0 in sgemm_tiled(int, int, int, const float *)
=========     and Read access at 0x2a0 in sgemm_tiled(int, int, int, const float *) [16 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""
CLEAN = """========= COMPUTE-SANITIZER
========= ERROR SUMMARY: 0 errors
"""
MEMCHECK = """========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at sgemm_naive+0x2b0
========= ERROR SUMMARY: 1 error
"""


def test_the_first_report_line_is_found_and_clean_logs_have_none():
    assert sanitize.first_report(RACE) == ("Error: Race reported between Write access at 0x1f0 in "
                                           "sgemm_tiled(int, int, int, const float *)")
    assert sanitize.first_report(MEMCHECK) == "Invalid __global__ write of size 4 bytes"
    assert sanitize.first_report(CLEAN) is None
    assert sanitize.first_report("========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)") is None
    assert sanitize.first_report("the application's own output\n") is None


def fake_sanitizer(tmp_path, monkeypatch, log: str, rc: int, record: str | None):
    """A compute-sanitizer that writes `log` to its --log-file, the case's record where the parent asks, keeps
    its arguments for the test, and exits `rc`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "compute-sanitizer"
    script.write_text(f"""#!{sys.executable}
import os, sys
args = sys.argv[1:]
open({str(tmp_path / 'args')!r}, 'w').write('\\n'.join(args))
with open({str(tmp_path / 'calls')!r}, 'a') as calls:  # one line a case's process, in the order they started
    calls.write(' '.join(args) + '\\n')
open(args[args.index('--log-file') + 1], 'w').write({log!r})
record = {record!r}
if record is not None:
    open(os.environ['{sanitize.RECORD_ENV}'], 'w').write(record)
sys.exit({rc})
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return tmp_path / "args"


BASE = {"workload": "gemm", "variant": "tiled", "shape": "257x257x257", "status": None}
PASSED = '{"status": "PASS", "rel_err": 1e-7, "median_ms": 80.0, "gflops": 0.4}'


def test_a_hazard_is_fail_with_its_first_report_line(tmp_path, monkeypatch):
    args = fake_sanitizer(tmp_path, monkeypatch, RACE, sanitize.HAZARD_EXIT, PASSED)
    rec = sanitize.run_case("racecheck", ["gemm", "--size", "257"], 3, BASE)
    assert rec["status"] == "FAIL"
    assert rec["error"] == ("racecheck: Error: Race reported between Write access at 0x1f0 in "
                            "sgemm_tiled(int, int, int, const float *)")
    assert rec["median_ms"] is None and rec["gflops"] is None  # a sanitized launch is no timing
    said = args.read_text().splitlines()
    assert said[:4] == ["--tool", "racecheck", "--error-exitcode", str(sanitize.HAZARD_EXIT)]
    assert said[-6:] == ["nnbench", "gemm", "--size", "257", "--sanitize-child", "3"]


def test_the_exit_code_alone_is_a_hazard(tmp_path, monkeypatch):
    fake_sanitizer(tmp_path, monkeypatch, "", sanitize.HAZARD_EXIT, PASSED)
    rec = sanitize.run_case("memcheck", ["gemm"], 0, BASE)
    assert rec["status"] == "FAIL" and rec["error"].startswith("memcheck: exit 99")


def test_a_clean_run_keeps_the_cases_verdict_and_says_it_was_sanitized(tmp_path, monkeypatch):
    fake_sanitizer(tmp_path, monkeypatch, CLEAN, 0, PASSED)
    rec = sanitize.run_case("racecheck", ["gemm"], 0, BASE)
    assert rec["status"] == "PASS" and rec["sanitizer"] == "sanitized: racecheck" and not rec.get("error")
    assert rec["rel_err"] == 1e-7 and rec["median_ms"] is None
    fake = tmp_path / "wrong"
    fake.mkdir()
    fake_sanitizer(fake, monkeypatch, CLEAN, 0, '{"status": "FAIL", "error": "error ratio 3e-2 > limit 2e-3"}')
    rec = sanitize.run_case("racecheck", ["gemm"], 0, BASE)
    assert rec["status"] == "FAIL" and rec["error"] == "error ratio 3e-2 > limit 2e-3"  # the answer was wrong


def test_a_case_process_that_dies_without_a_report_is_an_error(tmp_path, monkeypatch):
    fake_sanitizer(tmp_path, monkeypatch, CLEAN, 1, None)
    rec = sanitize.run_case("initcheck", ["conv"], 0, BASE)
    assert rec["status"] == "ERROR" and rec["error"].startswith("initcheck: the case's process ended with 1")


def one_line(res) -> str:
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    return lines[-1]


@pytest.mark.parametrize("command", [["gemm", "--size", "257"], ["conv"], ["train", "--net", "1"]])
def test_without_compute_sanitizer_one_line_exit_2(command, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing there
    monkeypatch.chdir(tmp_path)
    line = one_line(CliRunner().invoke(cli, [*command, "--sanitize", "racecheck"]))
    assert "compute-sanitizer is not on PATH" in line and line.startswith("nnbench: error:")


@pytest.mark.parametrize("command", [["gemm", "--size", "257"], ["conv"], ["train", "--net", "1"]])
def test_without_a_gpu_one_line_exit_2(command, tmp_path, monkeypatch):
    fake_sanitizer(tmp_path, monkeypatch, CLEAN, 0, PASSED)
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(cli, [*command, "--sanitize", "memcheck", "--backend", "cpu"])
    assert one_line(res).endswith("--sanitize: needs a GPU (this run is on the cpu backend)")
    assert "NumPy" not in res.output  # refused as the backend opens, before the device line and any result file


def test_an_unknown_tool_is_one_line_naming_the_tools():
    line = one_line(CliRunner().invoke(cli, ["gemm", "--sanitize", "leakcheck"]))
    assert "--sanitize" in line and all(t in line for t in sanitize.TOOLS)


SWEEP = """name: tiny_sanitize
suite: gemm
variants:
  naive: {}
  tiled:
    axes:
      ts: [8, 16]
shapes:
  - [33, 17, 9]
  - [64, 64, 64]
"""


def test_a_sanitized_sweep_runs_each_case_in_its_own_numbered_process(tmp_path, monkeypatch):
    from nnbench.sweeps import config, sanitized
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(SWEEP)
    specs = config.load_config(str(cfg))
    fake_sanitizer(tmp_path, monkeypatch, CLEAN, 0, PASSED)
    planned = sanitized.plan(specs, "cuda")
    assert len(planned) == 6  # 3 cases x 2 shapes, no vendor row
    rows = list(sanitized.parent(specs, "synccheck", ["sweep", str(cfg)]))
    calls = (tmp_path / "calls").read_text().splitlines()
    assert [c.split()[-1] for c in calls] == [str(k) for k in range(6)]  # --sanitize-child 0..5, in the plan's order
    assert [(r["variant"], r["params"], r["shape"]) for r in rows] == \
        [(j.case.variant.name, j.case.param_label, j.shape.label) for _, j in planned]
    assert all(r["status"] == "PASS" and r["sanitizer"] == "sanitized: synccheck" for r in rows)


def test_a_sanitized_sweep_without_a_gpu_or_the_sanitizer_is_one_line(tmp_path, monkeypatch):
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(SWEEP)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert "compute-sanitizer is not on PATH" in one_line(
        CliRunner().invoke(cli, ["sweep", str(cfg), "--sanitize", "racecheck"]))
    fake_sanitizer(tmp_path, monkeypatch, CLEAN, 0, PASSED)
    assert one_line(CliRunner().invoke(cli, ["sweep", str(cfg), "--sanitize", "racecheck", "--backend", "cpu"])) \
        .endswith("--sanitize: needs a GPU (this run is on the cpu backend)")


class KernelRunningCpu:
    """The CPU backend passing for one that runs kernels: the harness's sanitize paths refuse a CPU backend."""

    def __new__(cls):
        from nnbench.runtime.cpu import CpuBackend
        return type("Be", (CpuBackend,), {"runs_kernels": True})()


def test_the_harness_numbers_the_cases_alike_in_the_parent_and_the_child(tmp_path, monkeypatch):
    from nnbench import audit, harness, measure
    monkeypatch.setattr(audit, "UNTIMED", [False])  # the child's run sets it: not for the tests after this one
    from nnbench.workloads.gemm import session as gemm
    shapes = [gemm.Shape(8, 8, 8), gemm.Shape(16, 16, 16), gemm.Shape(5, 3, 2)]
    cases = gemm.plan([], {}, None, "cpu")
    settings = measure.TimingSettings(budget_s=0.01)
    fake_sanitizer(tmp_path, monkeypatch, CLEAN, 0, PASSED)
    monkeypatch.setitem(sanitize.MODE, "tool", "memcheck")
    monkeypatch.setitem(sanitize.MODE, "argv", ["gemm"])
    seen = [(rec["shape"], rec["status"])
            for rec in harness.run(gemm.WORKLOAD, KernelRunningCpu(), cases, shapes, settings, None, seed=1)]
    assert seen == [("8×8×8", "PASS"), ("16×16×16", "PASS"), ("5×3×2", "PASS")]
    assert [c.split()[-1] for c in (tmp_path / "calls").read_text().splitlines()] == ["0", "1", "2"]
    monkeypatch.setitem(sanitize.MODE, "tool", None)
    monkeypatch.setitem(sanitize.MODE, "child", 1)
    out = tmp_path / "child.json"
    monkeypatch.setenv(sanitize.RECORD_ENV, str(out))
    recs = list(harness.run(gemm.WORKLOAD, KernelRunningCpu(), cases, shapes, settings, None, seed=1))
    # the K-th case alone: one sample and the audited last one
    assert [(r["shape"], r["samples"]) for r in recs] == [("16×16×16", 2)]
    import json
    assert json.loads(out.read_text())["shape"] == "16×16×16"
