"""Issue 26's reproductions, one test each: nothing lost, nothing silently wrong. Files survive two
writers, a full disk and Ctrl-C; the gate fails what it must; bad input of every kind is one line
with exit code 2."""

import csv
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from nnbench import expr, memory, paths, rawresults, results, safeio, space, verdict
from nnbench.cli import cli
from nnbench.errors import NnbenchError
from nnbench.sweeps import config, sweep
from nnbench.yamlnodes import ConfigError

from .test_verdict import BASE, row, write

BASELINE = paths.RESULTS / "baselines" / "nvidia-h100-80gb-hbm3.csv"
ENV = dict(os.environ, PYTHONPATH=str(paths.ROOT), PYTHONUNBUFFERED="1")


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def one_line(res, *needles):
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("nnbench: error:"), res.output
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def nnbench(*args, **kw):
    kw.setdefault("env", ENV)
    return subprocess.run([sys.executable, "-m", "nnbench", *map(str, args)], capture_output=True, text=True,
                          timeout=120, **kw)


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def sweep_config(tmp_path, shapes, budget=0.001, name="h", noise=1.0):
    text = (f"name: {name}\nsuite: gemm\nbaseline: numpy\nshapes:\n"
            + "".join(f"  - [{m}, {n}, {k}]\n" for m, n, k in shapes)
            + f"timing: {{budget: {budget}, min_samples: 2, max_noise: {noise}, watchdog: 60}}\n"
            + "variants:\n  numpy:\n")
    p = tmp_path / f"{name}.yaml"
    p.write_text(text)
    return p


# -- 1. --csv never overwrites ----------------------------------------------------------------------
@pytest.mark.parametrize("command", [
    ["gemm", "--backend", "cpu", "--size", "16", "--budget", "0.01"],
    ["train", "--net", "1", "--backend", "cpu", "--max-iterations", "104", "--test-per-letter", "1"],
    ["conv", "--backend", "cpu", "--n", "1", "--c", "1", "--h", "5", "--w", "5", "--k", "1", "--r", "3",
     "--budget", "0.01"],
])
def test_csv_never_truncates_an_existing_file(tmp_path, command):
    target = tmp_path / "b.csv"
    shutil.copy(BASELINE, target)
    before = target.read_bytes()
    one_line(run(*command, "--csv", target), "b.csv", "never overwrites", "--force")
    assert target.read_bytes() == before


def test_force_replaces_and_says_so(tmp_path):
    target = tmp_path / "b.csv"
    shutil.copy(BASELINE, target)
    res = run("gemm", "--backend", "cpu", "--size", "16", "--budget", "0.01", "--csv", target, "--force")
    assert res.exit_code == 0, res.output
    assert [r["shape"] for r in rows(target)] == ["16×16×16"]


# -- 2. concurrent writers ----------------------------------------------------------------------------
def test_default_names_taken_in_the_same_second_never_collide(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "RESULTS", tmp_path)
    a = rawresults.open_sink(None, "gemm", "GPU A", results.FIELDS)
    b = rawresults.open_sink(None, "gemm", "GPU A", results.FIELDS)
    try:
        assert a.path != b.path and a.path.exists() and b.path.exists()
        assert b.path.name.startswith(a.path.stem)  # ...-1.csv beside ...-<stamp>.csv
    finally:
        a.close()
        b.close()


def test_a_second_writer_on_a_locked_file_is_refused(tmp_path):
    path = tmp_path / "r.csv"
    first = results.CsvSink(path)
    first.append({"variant": "naive", "status": "PASS"})
    with pytest.raises(NnbenchError, match="another nnbench process is writing this file"):
        results.CsvSink(path, append=True)
    first.close()
    results.CsvSink(path, append=True).close()  # free once the first is done
    assert len(rows(path)) == 1


def test_a_resume_of_a_file_being_written_is_refused_before_reading_it(tmp_path, monkeypatch):
    """Started 3 s apart, the second sweep finds the first's file as the newest to resume: it is
    refused (the lock is taken before the done rows are read), so no case runs twice."""
    monkeypatch.setattr(paths, "RESULTS", tmp_path)
    spec = config.load_sweep(sweep_config(tmp_path, [(5, 7, 3)]))
    sink, resume = sweep.open_result_file(spec, "cpu", None, fresh=False)
    assert not resume
    try:
        with pytest.raises(NnbenchError, match="another nnbench process"):
            sweep.open_result_file(spec, "cpu", None, fresh=False)
    finally:
        sink.close()


def test_two_sweeps_on_one_file_at_once_keep_every_row_once(tmp_path):
    """A sweep on a file that another writer holds is refused with one line naming the file; two sweeps
    started together on one file (which one gets the lock first, or whether they overlap at all on a
    loaded machine, is up to the scheduler) leave every case exactly once."""
    cfg = sweep_config(tmp_path, [(20 + i, 10, 10) for i in range(6)], budget=0.05, noise=1e-9)
    out = tmp_path / "r.csv"
    cmd = [sys.executable, "-m", "nnbench", "sweep", str(cfg), "--backend", "cpu", "--out", str(out)]
    holder = results.CsvSink(out, append=True)  # the lock a running sweep holds, taken deterministically
    try:
        refused = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=120)
    finally:
        holder.close()
    assert refused.returncode == 2, refused.stderr
    assert "Traceback" not in refused.stderr and str(out) in refused.stderr.strip().splitlines()[-1]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
             for _ in range(2)]
    results_ = [(p.wait(120), p.stderr.read()) for p in procs]
    assert sorted(rc for rc, _ in results_) in ([0, 0], [0, 2]), results_
    keys = [results.case_key_of(r) for r in rows(out)]
    assert len(keys) == 6 and len(set(keys)) == 6


# -- 3. the gate ---------------------------------------------------------------------------------------
def check(tmp_path, base_rows, cur_rows, *extra):
    b, c = write(tmp_path / "b.csv", base_rows), write(tmp_path / "c.csv", cur_rows)
    return run("check", b, c, *extra)


def test_a_current_file_with_no_rows_fails_the_gate(tmp_path):
    res = check(tmp_path, BASE[:3], [])
    assert res.exit_code == 1 and "3 MISSING" in res.output and "regression gate: FAILED" in res.output
    assert check(tmp_path, BASE[:3], [], "--allow-missing").exit_code == 0


@pytest.mark.parametrize("median", ["nan", "0", "inf", "-1", "fast"])
def test_a_baseline_median_that_is_not_positive_and_finite_fails(tmp_path, median):
    res = check(tmp_path, [row("naive", median)], [row("naive", 1.0)])
    assert res.exit_code == 1, res.output
    assert "INVALID" in res.output and "Traceback" not in res.output


@pytest.mark.parametrize("median", ["nan", "fast", "inf", "0"])
def test_a_current_median_that_is_nan_or_text_is_one_verdict_not_a_typeerror(tmp_path, median):
    res = check(tmp_path, [row("naive", 1.0)], [row("naive", median)])
    assert res.exit_code == 1, res.output
    assert "INVALID" in res.output and "Traceback" not in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)


def test_duplicate_rows_are_reported(tmp_path):
    res = check(tmp_path, [row("naive", 1.0)], [row("naive", 5.0), row("naive", 1.0)])
    assert res.exit_code == 0, res.output
    assert "1 cases have more than one row" in res.output


def test_failed_and_error_rows_in_the_baseline_fail_the_gate(tmp_path):
    res = check(tmp_path, [row("naive", 1.0, status="ERROR", error="fault")], [row("naive", 1.0)])
    assert res.exit_code == 1 and "INVALID" in res.output


def test_a_row_cut_short_is_set_aside_and_said(tmp_path):
    c = write(tmp_path / "c.csv", [row("naive", 1.0)])
    with open(c, "a") as f:
        f.write("gemm,naive,1,TS=")  # what a kill mid-write leaves
    b = write(tmp_path / "b.csv", [row("naive", 1.0)])
    res = run("check", b, c)
    assert res.exit_code == 0 and "1 rows without a valid status" in res.output


# -- 4. re-runs and ERROR rows -------------------------------------------------------------------------
def _errored_sweep(tmp_path):
    cfg = sweep_config(tmp_path, [(9, 8, 7)])
    out = tmp_path / "r.csv"
    assert run("sweep", cfg, "--backend", "cpu", "--out", out).exit_code == 0
    got = rows(out)
    got[0].update(status="ERROR", error="worker died: SIGKILL", median_ms="")
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=results.FIELDS)
        w.writeheader()
        w.writerows(got)
    return cfg, out


def test_a_rerun_of_a_file_with_an_error_row_still_exits_1(tmp_path):
    cfg, out = _errored_sweep(tmp_path)
    res = run("sweep", cfg, "--backend", "cpu", "--out", out)
    assert res.exit_code == 1, res.output
    assert "ran 0 cases" in res.output and "1 failed" in res.output


def test_retry_errors_runs_error_rows_again(tmp_path):
    cfg, out = _errored_sweep(tmp_path)
    res = run("sweep", cfg, "--backend", "cpu", "--out", out, "--retry-errors")
    assert res.exit_code == 0, res.output
    assert "ran 1 cases" in res.output
    assert [r["status"] for r in rows(out)] == ["ERROR", "PASS"]


def test_check_run_resumes_its_out_file_and_retries_errors(tmp_path):
    cfg, out = _errored_sweep(tmp_path)
    base = write(tmp_path / "base.csv", [row("numpy", 1.0, gpu="", shape="9×8×7", params="")])
    res = run("check", "--run", cfg, "--backend", "cpu", "--out", out, "--baseline", base, "--tolerance", "999%")
    assert "ran 1 cases" in res.output, res.output
    assert [r["status"] for r in rows(out)] == ["ERROR", "PASS"]


# -- 5. restrictions and configs are bounded ------------------------------------------------------------
def sweep_yaml(tmp_path, restrict=None, axes="{ts: [16, 32], wpt: [1, 2]}", raw=None):
    text = raw if raw is not None else (
        "name: t\nsuite: gemm\nshapes: [[9, 8, 7]]\nvariants:\n  coarsened:\n"
        f"    axes: {axes}\n" + (f"    restrict:\n      - ts > 0\n      - {restrict}\n" if restrict else ""))
    p = tmp_path / "s.yaml"
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return p


@pytest.mark.parametrize("restriction, needle", [
    ("'(((((ts ** 64) ** 64) ** 64) ** 64) ** 64) > 0'", "beyond"),
    ("log2(ts - ts) > 1", "log2 of a number <= 0"),
    ("cdiv(ts, wpt - wpt) > 1", "division by zero"),
    ("min() > 1", "min expected at least 1 argument"),
    ("(1, 2) < 3", "a list (a, b) used as a number"),
    ("5", "not a condition"),
    ("ts + 1", "not a condition"),
    ("'" + "+".join(["ts"] * 100_000) + " > 0'", "at most 2,000"),
    ("'" + "-" * 50_000 + "ts > 0'", "at most 2,000"),
])
def test_a_bad_restriction_is_one_line_at_its_own_line(tmp_path, restriction, needle):
    t0 = time.perf_counter()
    line = one_line(run("sweep", sweep_yaml(tmp_path, restriction), "--dry-run"), needle)
    assert time.perf_counter() - t0 < 5
    assert line.startswith(f"nnbench: error: {tmp_path / 's.yaml'}:9:"), line  # the restriction's line, not 5


def test_restrict_as_a_bare_number_is_refused(tmp_path):
    p = sweep_yaml(tmp_path, raw="name: t\nsuite: gemm\nshapes: [[9, 8, 7]]\nvariants:\n  coarsened:\n"
                                 "    restrict: 5\n")
    one_line(run("sweep", p, "--dry-run"), "s.yaml:6", "not a condition")


def test_a_huge_range_is_refused_without_being_built(tmp_path):
    t0 = time.perf_counter()
    one_line(run("sweep", sweep_yaml(tmp_path, axes="{ts: {start: 1, stop: 1000000000000}}"), "--dry-run"),
             "1,000,000,000,000 values", "at most 4,096")
    assert time.perf_counter() - t0 < 5
    assert isinstance(space.int_range(1, 10), range)


def test_expression_bounds_directly():
    for text in ("-" * 50_000 + "1 > 0", "+".join(["ts"] * 100_000)):
        with pytest.raises(expr.ExprError):
            expr.parse(text)
    with pytest.raises(expr.ExprError, match="beyond"):
        expr.evaluate("ts ** 64 ** 64 > 0", {"ts": 16})
    with pytest.raises(expr.ExprError, match="beyond"):
        expr.evaluate("ts * ts * ts * ts * ts * ts * ts * ts * ts * ts * ts * ts * ts * ts * ts * ts * ts > 0",
                      {"ts": 2**20})
    assert expr.evaluate("cdiv(M, TS)", {"M": 100, "TS": 32}) == 4  # geometry still works


def test_a_resume_refused_for_its_content_leaves_the_file_as_it_was(tmp_path):
    cfg = sweep_config(tmp_path, [(5, 4, 3)])
    for content in (b"a,b\n1,2", b"\xff\xfe" * 50):  # another schema, binary; neither ends in a newline
        out = tmp_path / "o.csv"
        out.write_bytes(content)
        res = run("sweep", cfg, "--backend", "cpu", "--out", out)
        # "name a new file": --fresh with an --out that exists is refused, so it cannot be the way out
        assert res.exit_code == 2 and res.stderr.count("\n") == 1 and "name a new file" in res.stderr, res.output
        assert out.read_bytes() == content


def test_base_60_integers_are_refused(tmp_path):
    p = sweep_yaml(tmp_path, raw="name: t\nsuite: gemm\nshapes: [[1:30, 8, 7]]\nvariants: {numpy: }\n")
    one_line(run("sweep", p, "--dry-run"), "s.yaml:3", "expected an integer")


def test_non_utf8_yaml_is_one_line(tmp_path):
    one_line(run("sweep", sweep_yaml(tmp_path, raw=b"name: t\xff\xfe\n"), "--dry-run"), "not UTF-8", "0xff")


def test_deeply_nested_yaml_is_one_line(tmp_path):
    one_line(run("sweep", sweep_yaml(tmp_path, raw="a: " + "[" * 5000 + "]" * 5000 + "\n"), "--dry-run"), "s.yaml")


# -- 6. file-system errors -------------------------------------------------------------------------------
def test_csv_on_dev_full_and_unwritable_places(tmp_path):
    gemm = ["gemm", "--backend", "cpu", "--size", "16", "--budget", "0.01"]
    one_line(run(*gemm, "--csv", "/dev/full"), "/dev/full", "never overwrites")
    one_line(run(*gemm, "--csv", "/dev/full", "--force"), "/dev/full", "not a regular file")
    one_line(run(*gemm, "--csv", tmp_path), str(tmp_path))  # a folder
    if os.geteuid() == 0:  # root writes through permission bits; /sys refuses even root
        one_line(run(*gemm, "--csv", "/sys/nnbench-test/x.csv"), "/sys/nnbench-test", "cannot create the folder")
    else:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        one_line(run(*gemm, "--csv", ro / "x.csv"), str(ro / "x.csv"), "Permission denied")


def _limit_file_size(n):
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (n, n))
    return apply


def test_a_disk_that_fills_mid_sweep_is_one_line_and_keeps_the_rows(tmp_path):
    cfg = sweep_config(tmp_path, [(5 + i, 4, 3) for i in range(12)])
    out = tmp_path / "r.csv"
    res = nnbench("sweep", cfg, "--backend", "cpu", "--out", out, preexec_fn=_limit_file_size(4000))
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith(f"nnbench: error: {out}: cannot write: File too large"), last
    got = rows(out)
    assert 1 <= len(got) < 12 and all(r["status"] == "PASS" for r in got)


@pytest.mark.parametrize("where", ["file", "sys"])
def test_a_cache_that_cannot_be_used_is_one_line(tmp_path, where):
    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc")
    cache = tmp_path / "cache-file" if where == "file" else Path("/sys/nnbench-cache")
    if where == "file":
        cache.write_text("not a folder")
    res = nnbench("sweep", "configs/ci.yaml", "--compile-only", "--arch", "sm_90",
                  env=dict(ENV, NNBENCH_CACHE=str(cache)), cwd=paths.ROOT)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert f"{cache}: the cubin cache (NNBENCH_CACHE) cannot be used" in res.stderr.strip().splitlines()[-1]


def test_report_bad_outputs_and_inputs(tmp_path):
    pytest.importorskip("matplotlib")
    data = Path("tests/data/train_net1_h100.csv")
    one_line(run("report", data, "--plot", "speedup", "--out", tmp_path / "x.txt"), "x.txt", ".png")
    one_line(run("report", data, "--plot", "speedup", "--out", "/dev/full"), "/dev/full", ".png")
    assert not Path("/dev/full.png").exists()
    (tmp_path / "empty.csv").write_text("")
    one_line(run("report", tmp_path / "empty.csv", "--plot", "speedup", "--out", tmp_path / "e.png"), "empty")
    (tmp_path / "bin.csv").write_bytes(bytes(range(256)) * 8)
    one_line(run("report", tmp_path / "bin.csv", "--plot", "speedup", "--out", tmp_path / "b.png"), "bin.csv")
    (tmp_path / "head.csv").write_text("status,speedup\n")
    one_line(run("report", tmp_path / "head.csv", "--plot", "speedup", "--out", tmp_path / "h.png"), "no rows")
    (tmp_path / "fail.csv").write_text("status,version,speedup_vs_sequential\nFAIL,kcm,3\n")
    one_line(run("report", tmp_path / "fail.csv", "--plot", "speedup", "--out", tmp_path / "f.png"), "nothing to plot")
    assert not list(tmp_path.glob("*.png"))


def test_report_out_name_prints_the_file_it_wrote_and_never_overwrites(tmp_path):
    pytest.importorskip("matplotlib")
    data = Path("tests/data/train_net1_h100.csv")
    res = run("report", data, "--plot", "speedup", "--out", tmp_path / "name")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "name.png").exists() and str(tmp_path / "name.png") in res.output.replace("\n", "")
    one_line(run("report", data, "--plot", "speedup", "--out", tmp_path / "name.png"), "never overwrites")


# -- 7. memory is estimated before allocation ------------------------------------------------------------
@pytest.mark.parametrize("args, needle", [
    (["gemm", "--backend", "cpu", "--size", "30000"], "shape 30000×30000×30000 needs about"),
    (["train", "--layers", "60,100000000,7", "--backend", "cpu"], "needs about"),
    (["conv", "--backend", "cpu", "--n", "8", "--c", "512", "--h", "256", "--w", "256", "--k", "512", "--r", "3"],
     "layer N8 C512 256x256 K512 3x3 needs about"),
])
def test_what_cannot_fit_is_refused_before_allocating(tmp_path, monkeypatch, args, needle):
    monkeypatch.setattr(memory, "host_available", lambda: 16 * 2**30)  # the same answer on every machine
    t0 = time.perf_counter()
    one_line(run(*args, "--csv", tmp_path / "m.csv"), needle, "GiB of host memory")
    assert time.perf_counter() - t0 < 10
    assert not (tmp_path / "m.csv").exists()


# -- 8. bad values ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, needles", [
    (["gemm", "--backend", "cpu", "--budget", "nan"], ["--budget nan", "finite"]),
    (["gemm", "--backend", "cpu", "--budget", "inf"], ["--budget inf", "finite"]),
    (["train", "--net", "1", "--backend", "cpu", "--rate", "inf"], ["--rate inf", "finite"]),
    (["gemm", "--backend", "cpu", "--rtol", "nan"], ["--rtol nan", "finite"]),
    (["gemm", "--backend", "cpu", "--seed", "-1"], ["--seed -1", "[0, 4294967295]"]),
    (["conv", "--backend", "cpu", "--seed", "-1"], ["--seed -1"]),
    (["train", "--net", "", "--backend", "cpu"], ["--net ''", "empty"]),
    (["train", "--net", "1", "--momentum", "nan"], ["--momentum nan", "[0, 1)"]),
    (["train", "--net", "1", "--tolerance", "-inf"], ["--tolerance -inf"]),
    (["sweep", "configs/ci.yaml", "--watchdog", "inf"], ["--watchdog inf"]),
    (["sweep", "configs/ci.yaml", "--dry-run", "--compile-only"], ["--dry-run and --compile-only"]),
])
def test_bad_values_are_refused(args, needles):
    one_line(run(*args), *needles)


@pytest.mark.parametrize("value", ["nan", ".inf", "inf", "-.inf"])
def test_yaml_numbers_must_be_finite(tmp_path, value):
    p = tmp_path / "s.yaml"
    p.write_text(f"name: t\nsuite: gemm\nshapes: [[9, 8, 7]]\ntiming: {{budget: {value}}}\nvariants: {{numpy: }}\n")
    with pytest.raises(ConfigError, match="s.yaml:4: timing.budget"):
        config.load_sweep(p)


# -- 9. messages and interrupts ---------------------------------------------------------------------------
def test_auto_fallback_hint_keeps_the_extra_name(tmp_path):
    from .conftest import gpu_available
    if gpu_available():
        pytest.skip("this machine has a GPU")
    # auto's line gives the bare reason (rich prints it, escaped); an explicit cuda's refusal the install hint
    res = run("gemm", "--backend", "auto", "--size", "8", "--budget", "0.01", "--csv", tmp_path / "a.csv")
    assert "nnbench: backend cpu (no GPU: PyCUDA is not installed)" in res.output
    res = run("gemm", "--backend", "cuda", "--size", "8")
    assert "pip install -e '.[gpu]'" in res.output.replace("\n", " ")
    assert "bash scripts/setup" in res.output.replace("\n", " ")


def _interrupt_when(cmd, ready, timeout=60):
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                            start_new_session=True)
    deadline = time.time() + timeout
    while time.time() < deadline and not ready():
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does: the whole foreground group
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err


def test_ctrl_c_in_a_sweep_is_one_line_and_keeps_rows(tmp_path):
    cfg = sweep_config(tmp_path, [(30 + i, 30, 30) for i in range(40)], budget=0.2, noise=1e-9)
    out = tmp_path / "r.csv"
    cmd = [sys.executable, "-m", "nnbench", "sweep", str(cfg), "--backend", "cpu", "--out", str(out)]
    rc, _, err = _interrupt_when(cmd, lambda: out.exists() and len(rows(out)) >= 2)
    assert rc == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err.strip().splitlines()[-1] == "nnbench: interrupted (Ctrl-C); every row already written is kept"
    assert len(rows(out)) >= 2


def test_ctrl_c_in_training_keeps_a_row_for_the_version_in_progress(tmp_path):
    out = tmp_path / "t.csv"
    cmd = [sys.executable, "-m", "nnbench", "train", "--net", "1", "--backend", "cpu", "--max-iterations", "5000000",
           "--csv", str(out)]
    start = time.time()
    rc, _, err = _interrupt_when(cmd, lambda: out.exists() and time.time() - start > 4)
    assert rc == 130 and "Traceback" not in err, err
    got = rows(out)
    assert len(got) == 1 and got[0]["status"] == "ERROR" and "interrupted (Ctrl-C) after" in got[0]["error"]
    assert int(got[0]["iterations"]) > 0 and got[0]["variant"] == "sequential" and got[0]["workload"] == "train"


# -- the pieces ------------------------------------------------------------------------------------------
def test_sink_turns_a_full_disk_into_one_error(tmp_path):
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    fd = os.open("/dev/full", os.O_WRONLY)
    sink = results.CsvSink.__new__(results.CsvSink)
    sink.fields, sink.path, sink._fd, sink.rows, sink._lead = results.FIELDS, Path("/dev/full"), fd, 0, ""
    with pytest.raises(NnbenchError, match="/dev/full: cannot write: No space left on device"):
        sink.append({"variant": "naive"})
    with pytest.raises(NnbenchError, match="closed"):
        sink.append({"variant": "naive"})


def test_unique_mode_takes_the_next_free_name(tmp_path):
    base = tmp_path / "x.csv"
    taken = [safeio.open_locked(base, safeio.UNIQUE) for _ in range(3)]
    assert [p.name for p, _ in taken] == ["x.csv", "x-1.csv", "x-2.csv"]
    for _, fd in taken:
        os.close(fd)


def test_verdict_load_of_unreadable_files_is_one_error(tmp_path):
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "bin.csv").write_bytes(b"\xff\xfe\x00" * 100)
    for name in ("empty.csv", "bin.csv"):
        with pytest.raises(NnbenchError, match=name):
            verdict.load(tmp_path / name)
    with pytest.raises(NnbenchError, match="folder"):
        verdict.load(tmp_path)
