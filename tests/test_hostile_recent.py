"""Hostile input to what was added since issue 42's campaigns (tests/test_campaign2*.py): soak's options, sweep's
--sanitize with its --out file to resume, report --html, check --run's baseline. The classes are the campaign's
(tests/test_campaign2_more.py's `outcome`): REFUSED is exit 2 with one `nnbench: error:` line naming the option or
the file, no traceback, no warning, and no file written or changed; ACCEPTED is exit 0. All on the CPU; sanitized
runs get the stand-in compute-sanitizer of tests/test_sanitize_resume.py, so no case needs a GPU."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests import test_campaign2 as first
from tests.test_campaign2 import invoke
from tests.test_campaign2_more import ACCEPTED, _fifo, _no_hang, _write, outcome  # noqa: F401 (_no_hang: a FIFO that blocks fails as a hang)
from tests.test_sanitize import SWEEP
from tests.test_sanitize_resume import calls, stand_in

_plain_user, good = first._plain_user, first.good
CPU = ["--backend", "cpu"]


def files_of(folder: Path) -> dict[Path, bytes]:
    """Every regular file under `folder` with its bytes (a FIFO is never read: that would wait for a writer)."""
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file() and not stat.S_ISFIFO(p.stat().st_mode)}


# -- soak ------------------------------------------------------------------------------------------
SOAK = {  # argv after `soak --backend cpu` -> what the one line must name
    "seeds past memory": (["--seeds", str(10**20)], "--seeds"),
    "seeds a billion": (["--seeds", str(10**9)], "--seeds"),
    "time-limit nan": (["--time-limit", "nan"], "--time-limit"),
    "time-limit inf": (["--time-limit", "inf"], "--time-limit"),
    "time-limit past a float": (["--time-limit", "1e400"], "--time-limit"),
    "gpus empty": (["--gpus", ""], "--gpus"),
    "gpus empty with workers": (["--gpus", "", "--workers-per-gpu", "1"], "--gpus"),
}


@pytest.mark.parametrize("name", list(SOAK))
def test_hostile_soak_option(tmp_path, name):
    argv, needle = SOAK[name]
    outcome(invoke("soak", *CPU, "--workload", "gemm", *argv), needle)


# -- sweep --sanitize TOOL --out FILE: the file to resume ------------------------------------------
@pytest.fixture
def sanitizing(tmp_path, monkeypatch):
    """The tiny config, a parent whose backend is cuda (it launches nothing itself) and the stand-in sanitizer."""
    from nnbench.cli import app
    monkeypatch.setattr(app, "worker_backend", lambda backend: "cuda")
    stand_in(tmp_path, monkeypatch)
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(SWEEP)
    return cfg


def _timed(good, t):
    return _write(t / "timed.csv", good[0].read_bytes())


def _cut(good, t):
    return _write(t / "cut.csv", good[0].read_bytes()[:300])


def _newer(good, t):
    """A result CSV of an nnbench with a column this one does not know."""
    head, *rest = good[0].read_text().splitlines(keepends=True)
    return _write(t / "newer.csv", (head.rstrip("\r\n") + ",tomorrow\r\n" + "".join(
        r.rstrip("\r\n") + ",x\r\n" for r in rest)).encode())


def _older(good, t):
    """A result CSV of the nnbench before rows recorded their provenance."""
    from nnbench import results
    return _write(t / "older.csv", (",".join(results.FIELDS_BEFORE_PROVENANCE) + "\r\n").encode())


def _unreadable(good, t):
    return _write(t / "u.csv", b"\xff\xfe\x00garbage").chmod(0) or t / "u.csv"


RESUMED = {  # the --out file a sanitized run would add to -> what the one line must name
    "a timed run's CSV": (_timed, ("timed.csv", "no sanitizer")),
    "a JSON results file": (lambda good, t: _write(t / "r.jsonl", good[1].read_bytes()), ("--out", "r.jsonl")),
    "a CSV cut inside its header": (_cut, ("--out", "cut.csv")),
    "a CSV of another program": (lambda good, t: _write(t / "o.csv", b"a,b\n1,2\n"), ("--out", "o.csv")),
    "binary garbage": (lambda good, t: _write(t / "g.csv", b"\x00\x01\xff\xfe"), ("--out", "g.csv")),
    "a newer nnbench's CSV": (_newer, ("--out", "newer.csv")),
    "an older nnbench's CSV": (_older, ("--out", "older.csv")),
    "a FIFO": (lambda good, t: _fifo(t, "f.csv"), "f.csv"),
    "/dev/full": (lambda good, t: Path("/dev/full"), "/dev/full"),
    "unreadable": (_unreadable, "u.csv"),
}


@pytest.mark.parametrize("name", list(RESUMED))
def test_hostile_file_to_resume_under_a_sanitizer(good, sanitizing, tmp_path, name):
    """Refused before the plan is printed and before any case's process starts, the file left as it was."""
    if name == "unreadable" and os.geteuid() == 0:
        pytest.skip("root reads any file")
    make, needle = RESUMED[name]
    out = make(good, tmp_path)
    before = files_of(tmp_path)
    outcome(invoke("sweep", sanitizing, "--sanitize", "racecheck", "--out", out), needle)
    assert calls(tmp_path) == []
    assert files_of(tmp_path) == before


SANITIZE_WITH = {  # what a sanitized run cannot also do -> what the one line must name
    "replay": (["--replay", "{good}"], ("--sanitize", "--replay")),
    "mpi": (["--mpi"], ("--sanitize", "--mpi")),
    "gpus": (["--gpus", "2"], ("--sanitize", "--gpus")),
    "compile-only": (["--compile-only"], ("--sanitize", "--compile-only")),
}


@pytest.mark.parametrize("name", list(SANITIZE_WITH))
def test_sanitize_refuses_what_it_would_ignore(good, sanitizing, tmp_path, name):
    argv, needles = SANITIZE_WITH[name]
    argv = [a.replace("{good}", str(good[0])) for a in argv]
    before = files_of(tmp_path)
    outcome(invoke("sweep", sanitizing, "--sanitize", "racecheck", "--out", tmp_path / "new.csv", *argv), needles)
    assert calls(tmp_path) == [] and files_of(tmp_path) == before


def test_a_plain_sweep_refuses_a_file_it_cannot_resume_before_its_plan(good, tmp_path):
    """The same refusal without a sanitizer: one line, before the plan and before any case runs."""
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(SWEEP)
    out = _newer(good, tmp_path)
    before = files_of(tmp_path)
    outcome(invoke("sweep", cfg, *CPU, "--out", out), ("--out", "newer.csv"))
    assert files_of(tmp_path) == before


def test_retry_errors_with_fresh_is_refused(tmp_path):
    """--fresh starts a new file: it has no ERROR rows for --retry-errors to run again (the pair ran, ignoring one)."""
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(SWEEP)
    outcome(invoke("sweep", cfg, *CPU, "--fresh", "--retry-errors", "--out", tmp_path / "new.csv"),
            ("--retry-errors", "--fresh"))
    assert not (tmp_path / "new.csv").exists()


# -- empty paths, and check --run's baseline ---------------------------------------------------------
EMPTY = {  # an option given '' (a shell variable that was never set) -> what the one line must name
    "report --html": (["report", "{good}", "--html", ""], "--html"),
    "report --baseline": (["report", "{good}", "--html", "{tmp}/r.html", "--baseline", ""], "--baseline"),
    "gemm --csv": (["gemm", *CPU, "--size", "16", "--budget", "0.01", "--csv", ""], "--csv"),
    "sweep --out": (["sweep", "{tiny}", *CPU, "--dry-run", "--out", ""], "--out"),
    "sweep --replay": (["sweep", "{tiny}", *CPU, "--dry-run", "--replay", ""], "--replay"),
    "check --out": (["check", "--run", "{tiny}", "--baseline", "{good}", *CPU, "--out", ""], "--out"),
}


@pytest.mark.parametrize("name", list(EMPTY))
def test_an_empty_path_is_refused_not_read_as_no_option(good, tmp_path, name):
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(SWEEP)
    argv, needle = EMPTY[name]
    fill = {"{good}": str(good[0]), "{tmp}": str(tmp_path), "{tiny}": str(cfg)}
    for k, v in fill.items():
        argv = [a.replace(k, v) for a in argv]
    from nnbench import paths
    results_before = set(paths.RESULTS.glob("*.csv")) if paths.RESULTS.exists() else set()
    before = files_of(tmp_path)
    outcome(invoke(*argv), needle)
    assert files_of(tmp_path) == before
    assert (set(paths.RESULTS.glob("*.csv")) if paths.RESULTS.exists() else set()) == results_before


@pytest.mark.parametrize("baseline", ["fifo", "json of another kind", "missing", "empty folder"])
def test_check_run_refuses_its_baseline_before_running_the_sweep(good, tmp_path, baseline):
    """A baseline that cannot be read is one line before any case runs: no result file is made for nothing."""
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(SWEEP)
    path = {"fifo": lambda: _fifo(tmp_path, "b.csv"),
            "json of another kind": lambda: _write(tmp_path / "b.json", b'{"a": 1}\n'),
            "missing": lambda: tmp_path / "b.csv",
            "empty folder": lambda: (tmp_path / "b").mkdir() or tmp_path / "b"}[baseline]()
    before = files_of(tmp_path)
    outcome(invoke("check", "--run", cfg, "--baseline", path, *CPU, "--out", tmp_path / "new.csv"), path.name)
    assert files_of(tmp_path) == before


# -- the autotune cache ------------------------------------------------------------------------------
class _Clock:
    """A tuner's timer whose every candidate takes 1 ms, so the choice needs no GPU."""

    def sample(self, launch):
        return 1.0, 0.0, 1

    def once(self, launch, reps):
        return 1.0


def test_an_autotune_cache_that_is_a_fifo_is_tuned_again_not_waited_on(tmp_path):
    """The cache is nnbench's own file, read before every tuned case on a GPU: a FIFO there (or a link to
    /dev/zero, which read until memory ran out) is no cache, so the case is tuned and the cache written anew."""
    from nnbench.runtime.autotune import PAIRED, TIMED, Identity, Tuner
    path = _fifo(tmp_path, "autotune.json")
    tuner = Tuner(Identity("a GPU", "a driver"), _Clock(), path=path)
    choice = tuner.choose("k", "source", "8x8x8", [{"T": 1}, {"T": 2}], lambda c: (lambda: None))
    assert choice.how in (TIMED, PAIRED) and tuner.timings == 2
    assert path.is_file()  # the FIFO replaced by the cache written whole


def test_two_sanitized_runs_on_one_out_file_at_once(tmp_path, monkeypatch):
    """A second run on the --out file a first is writing is refused (the first holds its lock): no case of its own
    starts, and the first's rows are left as they are."""
    import signal
    import subprocess
    import sys

    from nnbench.cli import app
    from tests.test_sanitize_resume import PARENT, ours, started_pids, wait_for
    monkeypatch.setattr(app, "worker_backend", lambda backend: "cuda")
    env = stand_in(tmp_path, monkeypatch, sleep={0: 60})
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(SWEEP)
    out = tmp_path / "racecheck.csv"
    first = subprocess.Popen([sys.executable, "-c", PARENT, "sweep", str(cfg), "--sanitize", "racecheck",
                              "--sanitize-jobs", "1", "--out", str(out)], cwd=tmp_path, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: (tmp_path / "pids").exists(), 30)  # case 0 runs, the file is open and locked
        before = out.read_bytes()
        res = invoke("sweep", cfg, "--sanitize", "racecheck", "--out", out)
        assert res.exit_code == 2 and "Traceback" not in res.output, res.output
        last = res.output.strip().splitlines()[-1]
        assert last.startswith("nnbench: error:") and str(out) in last and "another nnbench process" in last, last
        assert calls(tmp_path) == [0] and out.read_bytes() == before
    finally:
        first.send_signal(signal.SIGINT)
        try:
            first.wait(timeout=10)
        finally:
            first.kill()
            for pid in filter(ours, started_pids(tmp_path)):
                os.kill(pid, signal.SIGKILL)


# -- profile: another workload's problem option ---------------------------------------------------------------------
PROFILE_OTHER = {  # argv after `profile` -> what the one line must name; each option was taken and ignored before
    "gemm --net": (["gemm", "-v", "tiled", "--net", "3"], ("--net", "profile gemm reads --m, --n, --k")),
    "gemm --batch": (["gemm", "-v", "tiled", "--batch", "64"], ("--batch", "--m, --n, --k")),
    "train --m": (["train", "-v", "fused", "--m", "64"], ("--m", "profile train reads --net, --batch")),
    "train --layer": (["train", "-v", "fused", "--layer", "1,3,8,8,4,3"], ("--layer", "--net, --batch")),
    "conv --k": (["conv", "-v", "tiled", "--k", "64"], ("--k", "profile conv reads --layer, --model, --batch")),
    "conv --batch without --model": (["conv", "-v", "tiled", "--batch", "8"], ("--batch", "goes with --model")),
    "kernel --m with --config": (["kernel", "-v", "tiled", "--m", "64", "--config",
                                  "examples/tiled_gemm/tiled_gemm.yaml"], ("--m", "--problem N")),
}


@pytest.mark.parametrize("name", list(PROFILE_OTHER))
def test_profile_refuses_a_problem_option_it_would_not_read(name):
    argv, needles = PROFILE_OTHER[name]
    outcome(invoke("profile", *argv, *CPU, "--arch", "sm_90"), needles)


def test_a_sweep_on_an_out_file_another_nnbench_is_writing_is_refused_before_its_plan(good, tmp_path):
    """The lock was found taken only when the file was opened to run, after the plan was printed; now one line."""
    import fcntl
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(SWEEP)
    out = tmp_path / "busy.csv"
    out.write_bytes(good[0].read_bytes())
    before = out.read_bytes()
    with open(out, "a") as writer:  # another nnbench's sink holds this lock while it writes
        fcntl.flock(writer.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        outcome(invoke("sweep", str(cfg), *CPU, "--out", str(out)), (str(out), "another nnbench process is writing"))
    assert out.read_bytes() == before
    outcome(invoke("sweep", str(cfg), *CPU, "--dry-run", "--out", str(out)), ACCEPTED)  # unlocked: as before
