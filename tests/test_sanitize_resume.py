"""A sanitized sweep in bounded slices (nnbench/sanitize.py, nnbench/sweeps/sanitized.py): Ctrl-C or SIGTERM kills
the cases' processes, each with its children, ends the parent in seconds and keeps every row done, one held back
behind a slower case included; the same command again resumes the --out file: it skips the cases held, runs an
ERROR case again only with --retry-errors, and refuses a file of another tool. A stand-in compute-sanitizer on
PATH plays the cases."""

from __future__ import annotations

import csv
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from nnbench import sanitize
from nnbench.cli import cli
from tests.test_sanitize import CLEAN, SWEEP, one_line

ROOT = Path(__file__).resolve().parents[1]
CASES = 6  # SWEEP's plan: 3 cases x 2 shapes
# The stand-in's cases: {"sleep": {K: seconds}, "error": [K, ...]}; a sleeping case starts a child of its own, as
# compute-sanitizer starts python.
STAND_IN = """#!{python}
import json, os, subprocess, sys, time
args = sys.argv[1:]
k = int(args[-1])
how = json.load(open({how!r}))
with open({calls!r}, 'a') as calls:
    calls.write(' '.join(args) + '\\n')
seconds = how["sleep"].get(str(k), 0)
if seconds:
    child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])
    with open({pids!r}, 'a') as pids:
        pids.write(f'{{k}} {{os.getpid()}} {{child.pid}}\\n')
    time.sleep(seconds)
    child.kill()
if k in how["error"]:
    print('Segmentation fault')
    sys.exit(1)
open(args[args.index('--log-file') + 1], 'w').write({clean!r})
open(os.environ['{record}'], 'w').write(json.dumps({{"status": "PASS", "rel_err": k}}))
open({ended!r} + str(k), 'w').close()
"""


def stand_in(tmp_path: Path, monkeypatch, sleep: dict[int, float] | None = None, error=()) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    how = tmp_path / "how.json"
    how.write_text(json.dumps({"sleep": {str(k): s for k, s in (sleep or {}).items()}, "error": list(error)}))
    script = bin_dir / "compute-sanitizer"
    script.write_text(STAND_IN.format(python=sys.executable, how=str(how), calls=str(tmp_path / "calls"),
                                      pids=str(tmp_path / "pids"), clean=CLEAN, record=sanitize.RECORD_ENV,
                                      ended=str(tmp_path / "ended-")))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
                PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


def calls(tmp_path: Path) -> list[int]:
    """The K of each case's process started, in the order they started."""
    path = tmp_path / "calls"
    return [int(line.split()[-1]) for line in path.read_text().splitlines()] if path.exists() else []


def rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"  # a zombie has ended; only its parent's wait is missing


def started_pids(tmp_path: Path) -> list[int]:
    """The sleeping cases' processes and their children."""
    path = tmp_path / "pids"
    return [int(p) for line in path.read_text().splitlines() for p in line.split()[1:]] if path.exists() else []


def ours(pid: int) -> bool:
    """A stand-in's process or its child, still there (not a pid taken since by another)."""
    try:
        line = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return alive(pid) and (b"compute-sanitizer" in line or b"time.sleep(120)" in line)


def wait_for(condition, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


# The parent as `python -m nnbench`, but on a host without a GPU: its backend is cuda (it launches nothing itself).
PARENT = ("import sys; from nnbench.cli import app; app.worker_backend = lambda backend: 'cuda'; "
          "from nnbench.cli import cli; cli.main(sys.argv[1:])")


@pytest.mark.parametrize("sig, code, said", [(signal.SIGINT, 130, "interrupted (Ctrl-C)"),
                                             (signal.SIGTERM, 143, "terminated (SIGTERM)")])
def test_an_interrupt_kills_the_cases_and_keeps_the_rows_done(sig, code, said, tmp_path, monkeypatch):
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(SWEEP)
    out = tmp_path / "racecheck.csv"
    # case 1 ends at once, behind case 0, which (as 2 and 3, started when 1 ended) would run for minutes
    env = stand_in(tmp_path, monkeypatch, sleep={0: 300, 2: 300, 3: 300})
    proc = subprocess.Popen([sys.executable, "-c", PARENT, "sweep", str(cfg), "--sanitize", "racecheck",
                             "--sanitize-jobs", "3", "--out", str(out)], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        started = lambda: {int(line.split()[0]) for line in  # noqa: E731
                           (tmp_path / "pids").read_text().splitlines()} if (tmp_path / "pids").exists() else set()
        assert wait_for(lambda: started() == {0, 2, 3} and (tmp_path / "ended-1").exists(), 60), calls(tmp_path)
        time.sleep(1.0)  # the parent's thread reads case 1's record: its row is done, held back behind case 0
        pids = started_pids(tmp_path)
        assert all(alive(p) for p in pids)
        proc.send_signal(sig)
        begun = time.monotonic()
        _, stderr = proc.communicate(timeout=10)
        took = time.monotonic() - begun
        assert took < 5, f"the parent took {took:.1f} s to end"
        assert wait_for(lambda: not any(alive(p) for p in pids), 3), [p for p in pids if alive(p)]
    finally:
        proc.kill()
        for pid in filter(ours, started_pids(tmp_path)):  # those a defective parent left behind
            os.kill(pid, signal.SIGKILL)
    assert proc.returncode == code, stderr
    assert stderr.strip().splitlines()[-1] == f"nnbench: {said}; every row already written is kept"
    assert [(r["rel_err"], r["status"]) for r in rows(out)] == [("1", "PASS")]
    assert sorted(calls(tmp_path)) == [0, 1, 2, 3]  # none started after the interrupt


def invoke(cfg: Path, out: Path, *more: str, tool: str = "racecheck"):
    return CliRunner().invoke(cli, ["sweep", str(cfg), "--sanitize", tool, "--sanitize-jobs", "2", "--out", str(out),
                                    *more])


@pytest.fixture
def on_gpu(tmp_path, monkeypatch):
    from nnbench.cli import app
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(app, "worker_backend", lambda backend: "cuda")  # the parent launches nothing itself
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(SWEEP)
    return cfg


def keep_rows(path: Path, ks: set[int]) -> None:
    """The file as a run cut short after the cases `ks` would have left it."""
    lines = path.read_text().splitlines(keepends=True)
    kept = [line for line, r in zip(lines[1:], rows(path)) if int(float(r["rel_err"])) in ks]
    path.write_text(lines[0] + "".join(kept))


def test_the_same_command_again_skips_the_cases_held_and_adds_the_rest(on_gpu, tmp_path, monkeypatch):
    out = tmp_path / "racecheck.csv"
    stand_in(tmp_path, monkeypatch)
    assert invoke(on_gpu, out).exit_code == 0
    keep_rows(out, {0, 2, 3})
    (tmp_path / "calls").unlink()
    res = invoke(on_gpu, out)
    assert res.exit_code == 0, res.output
    assert f"{out}: resuming, 3 of 6 cases to run under racecheck" in res.output
    assert sorted(calls(tmp_path)) == [1, 4, 5]  # K counts the whole plan, as the child does
    got = rows(out)
    assert [int(float(r["rel_err"])) for r in got] == [0, 2, 3, 1, 4, 5]  # added after the rows held
    from nnbench.sweeps import config, sanitized
    planned = sanitized.plan(config.load_config(str(on_gpu)), "cuda")
    for r in got:  # each row is the case its K names in the plan
        _, job = planned[int(float(r["rel_err"]))]
        assert (r["variant"], r["params"], r["shape"]) == (job.case.variant.name, job.case.param_label, job.shape.label)
    (tmp_path / "calls").unlink()
    assert "0 of 6 cases to run" in invoke(on_gpu, out).output and calls(tmp_path) == []


def test_an_error_runs_again_only_with_retry_errors(on_gpu, tmp_path, monkeypatch):
    out = tmp_path / "racecheck.csv"
    stand_in(tmp_path, monkeypatch, error=[4])
    assert invoke(on_gpu, out).exit_code == 1  # case 4's process crashed: ERROR
    assert [r["status"] for r in rows(out)] == ["PASS"] * 4 + ["ERROR", "PASS"]
    (tmp_path / "calls").unlink()
    assert invoke(on_gpu, out).exit_code == 0 and calls(tmp_path) == []
    stand_in(tmp_path, monkeypatch)  # the crash is mended
    res = invoke(on_gpu, out, "--retry-errors")
    assert res.exit_code == 0, res.output
    assert calls(tmp_path) == [4]
    last = rows(out)[-1]
    assert (float(last["rel_err"]), last["status"]) == (4, "PASS")


def test_a_file_of_another_tool_is_refused_in_one_line(on_gpu, tmp_path, monkeypatch):
    out = tmp_path / "memcheck.csv"
    stand_in(tmp_path, monkeypatch, error=[1])
    invoke(on_gpu, out, tool="memcheck")
    before = out.read_text()
    (tmp_path / "calls").unlink()
    res = invoke(on_gpu, out, tool="racecheck")
    assert res.exit_code == 2
    assert one_line(res) == (f"nnbench: error: --out {out}: holds memcheck rows; this run is --sanitize racecheck: "
                             "name another file")
    assert calls(tmp_path) == [] and out.read_text() == before


TWO_PARTS = """name: two_parts
parts:
  - workload: gemm
    vendor: false
    shapes: [[33, 17, 9]]
    variants:
      naive:
      tiled:
        axes: {ts: [8, 16]}
  - workload: conv
    vendor: false
    shapes: [[3, 5, 11, 13, 7, 3, 1, 1]]
    variants:
      direct:
      tiled:
"""


def test_a_resumed_run_keeps_to_its_workloads(tmp_path, monkeypatch):
    from nnbench.cli import app
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(app, "worker_backend", lambda backend: "cuda")
    cfg = tmp_path / "two.yaml"
    cfg.write_text(TWO_PARTS)
    out = tmp_path / "racecheck.csv"
    stand_in(tmp_path, monkeypatch)
    assert invoke(cfg, out, "--workload", "gemm").exit_code == 0
    assert [r["workload"] for r in rows(out)] == ["gemm"] * 3
    (tmp_path / "calls").unlink()
    res = invoke(cfg, out, "--workload", "conv")
    assert res.exit_code == 0, res.output
    assert "2 of 2 cases to run" in res.output
    assert sorted(calls(tmp_path)) == [0, 1]  # the conv part's plan, as its child counts it with --workload conv
    assert [r["workload"] for r in rows(out)] == ["gemm"] * 3 + ["conv"] * 2


def test_a_resumed_run_runs_again_the_cases_whose_kernel_changed(on_gpu, tmp_path, monkeypatch):
    """Editing a kernel re-runs its cases (issue 45): a held row whose provenance is not the case's digest now (its
    source, headers, flags or nnbench changed; the row's own driver, CUDA and nvcc) is not skipped."""
    from nnbench.runtime import provenance
    from nnbench.sweeps import config, sanitized
    out = tmp_path / "racecheck.csv"
    stand_in(tmp_path, monkeypatch)
    assert invoke(on_gpu, out).exit_code == 0
    (tmp_path / "calls").unlink()
    assert "0 of 6 cases to run" in invoke(on_gpu, out).output and calls(tmp_path) == []
    closure = provenance._closure
    monkeypatch.setattr(provenance, "_closure", lambda src, inc: closure(src, inc) + ("edited" if "tiled" in str(src)
                                                                                        else ""))
    planned = sanitized.plan(config.load_config(str(on_gpu)), "cuda")
    edited = [k for k, (_, job) in enumerate(planned) if job.case.variant.name == "tiled"]
    res = invoke(on_gpu, out)
    assert res.exit_code == 0, res.output
    assert f"resuming, {len(edited)} of 6 cases" in res.output and sorted(calls(tmp_path)) == edited


def test_a_sanitized_runs_file_is_refused_by_the_gate_and_the_history(on_gpu, tmp_path, monkeypatch):
    """A sanitized run's rows hold hazards and no timings: the gate and the history say so in one line (exit 2);
    they read it as a timed run with its medians missing (INVALID rows, exit 1; 'no timestamp; not an nnbench
    result file')."""
    out = tmp_path / "racecheck.csv"
    stand_in(tmp_path, monkeypatch)
    assert invoke(on_gpu, out).exit_code == 0
    for cmd in (["check", str(out), str(out)], ["history", "record", str(out), "--db", str(tmp_path / "h.sqlite")]):
        res = CliRunner().invoke(cli, cmd)
        line = one_line(res)
        assert len(res.output.strip().splitlines()) == 1, res.output
        assert f"{out}: the rows of a sanitized run (--sanitize)" in line and "timed run" in line
