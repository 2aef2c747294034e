"""Issue 41, the CLI and API side: a default backend that runs anywhere and says why, GPU-only choices
that leave the CPU path running (and a hint that runs), a CPU default length, no header-only files
after an interruption, and API/plugin shapes a user can rely on. All on the CPU, in seconds."""

import csv
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import warnings

import pytest
from click.testing import CliRunner

from nnbench import backend_choice, paths, results, safeio
from nnbench.cli import cli

from .conftest import gpu_available

no_gpu = pytest.mark.skipif(gpu_available(), reason="this machine has a GPU: auto takes it")
QUICK = ["--budget", "0.01"]


@pytest.fixture(autouse=True)
def _plain_user(monkeypatch, tmp_path):
    """No NNBENCH_BACKEND and an empty config home, whatever the machine running the tests has."""
    monkeypatch.delenv(backend_choice.ENV, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config-home"))


def run(*args, env=None):
    return CliRunner().invoke(cli, [str(a) for a in args], env=env)


def user_config(tmp_path, text: str):
    path = tmp_path / "config-home" / "nnbench" / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# -- 1. the backend: option > NNBENCH_BACKEND > user config > auto ---------------------------------
def test_precedence(tmp_path, monkeypatch):
    assert backend_choice.requested(None) == backend_choice.Request("auto", "default")
    path = user_config(tmp_path, "# mine\nbackend: cpu\n")
    assert backend_choice.requested(None) == backend_choice.Request("cpu", f"backend: cpu in {path}:2")
    monkeypatch.setenv("NNBENCH_BACKEND", "CUDA ")
    assert backend_choice.requested(None) == backend_choice.Request("cuda", "NNBENCH_BACKEND=cuda")
    assert backend_choice.requested("cpu") == backend_choice.Request("cpu", "--backend")


@pytest.mark.parametrize("env, config, needles", [
    ({"NNBENCH_BACKEND": "gpu"}, None, ["NNBENCH_BACKEND=gpu", "cuda, cpu, auto"]),
    ({}, "backend: tpu\n", ["config.yaml:1", "backend", "'tpu'", "cuda, cpu, auto"]),
    ({}, "\nbackends: cpu\n", ["config.yaml:2", "unknown key 'backends'", "backend"]),
])
def test_a_bad_default_is_one_line_naming_its_source(tmp_path, env, config, needles):
    if config is not None:
        user_config(tmp_path, config)
    res = run("gemm", "--size", "16", env=env)
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("nnbench: error: "), res.output
    for n in needles:
        assert n in lines[0], lines[0]


def test_the_source_of_a_default_is_said(tmp_path):
    path = user_config(tmp_path, "backend: cpu\n")
    res = run("gemm", "--size", "16", *QUICK, "--csv", tmp_path / "a.csv")
    assert res.exit_code == 0, res.output
    assert f"nnbench: backend cpu (backend: cpu in {path}:1)" in res.output
    res = run("gemm", "--size", "16", *QUICK, "--csv", tmp_path / "b.csv", env={"NNBENCH_BACKEND": "cpu"})
    assert res.exit_code == 0 and "nnbench: backend cpu (NNBENCH_BACKEND=cpu)" in res.output, res.output
    res = run("gemm", "--size", "16", *QUICK, "--csv", tmp_path / "c.csv", "--backend", "cpu")
    assert res.exit_code == 0 and "nnbench: backend" not in res.output  # typed: nothing to repeat


@pytest.mark.parametrize("command", ["gemm", "conv", "train", "sweep", "profile", "check"])
def test_auto_is_the_default_of_every_command(command):
    """--help names where the default comes from, and no default of cuda."""
    res = run(command, "--help")
    assert res.exit_code == 0
    assert "NNBENCH_BACKEND" in res.output and "default: cuda" not in res.output.replace("\n", " ")


@no_gpu
def test_no_gpu_line(tmp_path):
    res = run("gemm", "--size", "16", *QUICK, "--csv", tmp_path / "a.csv")
    assert res.exit_code == 0, res.output
    first = res.output.splitlines()[0]
    assert first.startswith("nnbench: backend cpu (no GPU: ") and first.endswith(")"), first
    assert "scripts/setup" not in first  # the reason alone: the install hint is for an explicit --backend cuda


@no_gpu
def test_sweep_resolves_auto_for_its_workers(tmp_path):
    res = run("sweep", "examples/vector_add/vector_add.yaml", "--out", tmp_path / "v.csv")
    assert res.exit_code == 0, res.output
    assert "nnbench: backend cpu (no GPU: " in res.output
    assert {r["backend"] for r in csv.DictReader((tmp_path / "v.csv").open())} == {"cpu"}


# -- 2. the design card's commands without a GPU, and hints that run ------------------------------
def _hint(output: str) -> list[str]:
    m = re.search(r"`nnbench ([^`]*--compile-only)`", output)
    assert m, output
    return shlex.split(m.group(1))


@no_gpu
@pytest.mark.parametrize("args, left_out, ran", [
    (["gemm", "--ts", "32", "--wpt", "8", "--size", "48"], "tiled, coarsened need a GPU", "numpy"),
    (["gemm", "--backend", "cpu", "-v", "tiled", "--ts", "16", "--size", "48"], "tiled needs a GPU", "numpy"),
    (["conv", "-p", "tiled", "--tile", "8", "--set", "odd"], "tiled needs a GPU", "numpy"),
    (["conv", "--backward", "--set", "odd"], "--backward needs a GPU", "numpy"),
    (["train", "--net", "1", "-v", "fused", "--max-iterations", "52", "--no-letters"], "fused needs a GPU",
     "sequential"),
])
def test_gpu_choices_leave_the_cpu_path_running(tmp_path, args, left_out, ran):
    res = run(*args, *([] if args[0] == "train" else QUICK), "--csv", tmp_path / "r.csv")
    assert res.exit_code == 0, res.output
    assert f"nnbench: not run here: {left_out}; running {ran} on the CPU" in res.output, res.output
    rows = list(csv.DictReader((tmp_path / "r.csv").open()))
    assert rows and {r["variant"] for r in rows} == {ran} and {r["status"] for r in rows} == {"PASS"}


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize("args", [
    ["gemm", "--ts", "32", "--wpt", "8", "--size", "48"],
    ["conv", "-p", "tiled", "--tile", "8", "--set", "odd"],
])
def test_the_hint_runs_without_a_gpu(tmp_path, args):
    """The command a refusal-free line points at compiles and shows resources: no circle."""
    res = run(*args, *QUICK, "--csv", tmp_path / "r.csv", "--backend", "cpu")
    hinted = run(*_hint(res.output), "--backend", "cpu")
    assert hinted.exit_code == 0, hinted.output
    assert "compiling for sm_90" in hinted.output and "registers" in hinted.output and "spill" in hinted.output
    name = args[args.index("-p") + 1] if "-p" in args else "coarsened"
    assert re.search(rf"│{name}\s", hinted.output), hinted.output


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
def test_sweep_compile_only_without_a_gpu_compiles_for_sm90():
    res = run("sweep", "configs/step9.yaml", "--compile-only", "--backend", "cpu")
    assert res.exit_code == 0, res.output
    assert "compiling for sm_90" in res.output and re.search(r"compile: \d+ kernels for sm_90", res.output)


def test_bad_names_are_still_refused_first():
    for args, needle in ((["gemm", "-v", "nope"], "--variant nope"), (["conv", "-p", "nope"], "--path nope"),
                         (["gemm", "--ts", "33"], "--ts 33"), (["gemm", "--arch", "sm_90"], "--compile-only"),
                         (["gemm", "--compile-only", "--arch", "hopper"], "--arch hopper")):
        res = run(*args)
        lines = [ln for ln in res.output.splitlines() if ln.strip()]
        assert res.exit_code == 2 and len(lines) == 1 and needle in lines[0], res.output


# -- 3. a CPU default length, and interruptions ----------------------------------------------------
def test_cpu_default_iterations_fit_the_budget():
    from nnbench import nets
    from nnbench.workloads.train import mlp
    for net in nets.load().values():
        n = mlp.cpu_default_iterations(net.layers)
        per = mlp.CPU_S_PER_ITERATION + mlp.CPU_S_PER_MAC * net.feedforward_macs
        assert n % 52 == 0 and 52 <= n and (n * per <= mlp.CPU_BUDGET_S or n == 52)
    assert mlp.cpu_default_iterations(nets.load()["8"].layers) < 5000  # ~13 ms an iteration in NumPy


@no_gpu
def test_train_on_the_cpu_stops_at_its_default_and_says_so(tmp_path, monkeypatch):
    from nnbench.workloads.train import mlp
    monkeypatch.setattr(mlp, "CPU_BUDGET_S", 0.01)  # the floor: one epoch of 52

    def too_long(*_):
        raise TimeoutError("train --net 8 ran past its CPU default")
    before = signal.signal(signal.SIGALRM, too_long)
    signal.alarm(60)  # uncapped, Net 8 would train 2,000,000 iterations: hours
    try:
        res = run("train", "--net", "8", "--no-letters", "--csv", tmp_path / "t.csv")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)
    assert res.exit_code == 0 and res.exception is None, res.output
    assert "at most 52 iterations" in res.output
    assert "stopped after 52 iterations (CPU default; --max-iterations for more)" in res.output
    res = run("train", "--net", "1", "--no-letters", "--max-iterations", "104", "--csv", tmp_path / "u.csv")
    assert res.exit_code == 0 and "CPU default" not in res.output and "at most 104 iterations" in res.output


def test_a_result_file_without_rows_is_removed(tmp_path):
    sink = results.CsvSink(tmp_path / "a.csv")
    sink.close()
    assert not (tmp_path / "a.csv").exists()
    sink = results.CsvSink(tmp_path / "b.csv")
    sink.append({"workload": "gemm", "status": "PASS"})
    sink.close()
    assert len((tmp_path / "b.csv").read_text().splitlines()) == 2
    sink = results.CsvSink(tmp_path / "b.csv", mode=safeio.APPEND)  # a resume that adds nothing keeps the file
    sink.close()
    assert len((tmp_path / "b.csv").read_text().splitlines()) == 2


def test_sigterm_keeps_rows_and_leaves_a_file_report_reads(tmp_path):
    out = tmp_path / "t.csv"
    env = dict(os.environ, PYTHONPATH=str(paths.ROOT), XDG_CONFIG_HOME=str(tmp_path))
    env.pop("NNBENCH_BACKEND", None)
    p = subprocess.Popen([sys.executable, "-m", "nnbench", "train", "--net", "8", "--backend", "cpu",
                          "--max-iterations", "100000", "--csv", str(out)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env, cwd=paths.ROOT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not out.exists() or p.poll() is not None):
        time.sleep(0.2)
    time.sleep(1.5)  # into the training loop
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 143, err
    assert "terminated (SIGTERM)" in err and "Traceback" not in err
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 1 and rows[0]["status"] == "ERROR" and "interrupted" in rows[0]["error"]
    res = run("report", out, "--html", tmp_path / "r.html")
    assert res.exit_code == 0, res.output


def test_report_and_check_leave_a_header_only_file_out(tmp_path):
    good = tmp_path / "good.csv"
    assert run("gemm", "--backend", "cpu", "--size", "16", *QUICK, "--csv", good).exit_code == 0
    empty = tmp_path / "empty.csv"
    empty.write_text(good.read_text().splitlines()[0] + "\n")
    res = run("report", empty, good, "--html", tmp_path / "r.html")
    assert res.exit_code == 0, res.output
    assert f"nnbench: {empty}: has a header but no rows" in res.output.replace("\n", " ").replace("  ", " ")
    res = run("check", empty, good)
    assert "Traceback" not in res.output and f"{empty}: has a header but no rows" in res.output


# -- 4. shapes: the API frame, the fixture, report's warnings, conv in check, the dry-run, overhead --
def test_an_api_frame_has_every_column_whatever_it_holds():
    import nnbench
    df = nnbench.benchmark("examples/vector_add/vector_add.yaml", backend="cpu", params={"BLOCK": 256, "ITEMS": 1},
                           problems=[{"N": 1000}], budget=0.01)
    assert list(df.columns) == results.FIELDS
    # on the CPU the row is the reference's, and says so (REFERENCE, never PASS under the kernel's name)
    assert (df["status"] == "REFERENCE").all() and "error" in df.columns


def test_report_prints_no_pandas_warning(tmp_path):
    import pandas as pd
    full = tmp_path / "full.csv"  # every column of today's schema: pandas' block count is what warned
    assert run("gemm", "--backend", "cpu", "--size", "16", *QUICK, "--csv", full).exit_code == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error", pd.errors.PerformanceWarning)
        res = run("report", full, "docs/data/figures/ladder_odd.csv", "--html", tmp_path / "r.html")
    assert res.exit_code == 0 and res.exception is None, res.output


def test_cpu_conv_rows_compare_in_check(tmp_path):
    for name in ("a", "b"):
        res = run("conv", "--backend", "cpu", "--set", "odd", *QUICK, "--csv", tmp_path / f"{name}.csv")
        assert res.exit_code == 0, res.output
    rows = list(csv.DictReader((tmp_path / "a.csv").open()))
    assert all(float(r["iqr_ms"]) >= 0 and int(r["samples"]) >= 10 for r in rows)
    res = run("check", tmp_path / "a.csv", tmp_path / "b.csv", "--allow-unstable", "--tolerance", "500%")
    assert "INVALID" not in res.output and res.exit_code == 0, res.output


def test_the_dry_run_counts_what_a_run_runs():
    from nnbench.sweeps import config
    from nnbench.sweeps.sweep import plan_jobs
    res = run("sweep", "configs/ci.yaml", "--dry-run")
    assert res.exit_code == 0
    shown = [(name, int(n)) for name, n in re.findall(r"│(\S+)\s+│.*│\s*(\d+)│", res.output)]
    want = []
    for spec in config.load_config("configs/ci.yaml"):
        jobs = [j.case.variant.name for j in plan_jobs(spec, False, "cuda") if j.kind == "case"]
        want += [(c.variant, jobs.count(c.variant)) for c in spec.counts] + [("total", len(jobs))]
    assert shown == want, (shown, want)
    assert ("fused", 3) in shown and ("batched", 2) in shown  # per-sample nets, mini-batch nets


def test_overhead_of_several_workers_is_a_share():
    from nnbench.sweeps.sweep import Outcome
    o = Outcome(path=None, jobs=8, run_s=10.0, wall_s=12.0, gpu_s=30.0, workers=4)
    assert o.overhead == pytest.approx(0.25) and o.overhead <= o.overhead_total == pytest.approx(0.375)
    assert Outcome(path=None, jobs=1, run_s=10.0, wall_s=10.0, gpu_s=4.0).overhead == pytest.approx(0.6)


def test_train_variant_option_and_the_version_option():
    assert run("--version").output.startswith("nnbench, version")
    res = run("train", "-V", "fused")
    assert res.exit_code == 2 and "-V" in res.output
    assert "-v, --variant NAME" in run("train", "--help").output


def test_help_cites_files_that_exist():
    from nnbench.cli import app
    for name in app.cli.commands:
        text = run(name, "--help").output
        for cited in re.findall(r"\b((?:configs|docs|examples)/[\w./-]+\.(?:yaml|csv|json|jsonl))\b", text):
            assert (paths.ROOT / cited).exists(), f"{name} --help cites {cited}"
    assert "profile train" in run("profile", "--help").output and "profile mlp" not in run("profile", "--help").output
    assert "docs/data/train_table.csv" not in run("report", "--help").output
    assert "Let --csv" not in run("report", "--help").output


def test_the_plugin_returns_a_list_and_takes_nnbench_backend(tmp_path):
    from .test_kernel_suite import pytester_run
    p = pytester_run(tmp_path, env={"NNBENCH_BACKEND": "cpu", "XDG_CONFIG_HOME": str(tmp_path)})
    assert p.returncode == 0 and "1 passed" in p.stdout, p.stdout + p.stderr  # PLUGIN_TEST unpacks [rec]
    p = pytester_run(tmp_path, env={"NNBENCH_BACKEND": "tpu", "XDG_CONFIG_HOME": str(tmp_path)})
    assert p.returncode == 4 and "NNBENCH_BACKEND=tpu: choose from cuda, cpu, auto" in p.stderr, p.stderr


def readme_plugin_example() -> str:
    """The README's pytest-plugin test as a user pastes it, its config path made absolute (pytest runs in a temp
    folder) and its rate threshold dropped (a GPU's figure; the CPU path times the reference)."""
    text = (paths.ROOT / "README.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "nnbench_kernel" in b)
    test = block[block.index("def test_"):]
    test = "\n".join(ln for ln in test.splitlines() if not ln.strip().startswith("assert "))
    return test.replace('"examples/', f'"{paths.ROOT}/examples/') + "\n"


def test_the_readmes_plugin_example_runs_on_the_cpu_path(tmp_path):
    """`[rec] = nnbench_kernel(...)` unpacks one record: the call must pick one case and one problem."""
    from .test_kernel_suite import pytester_run
    p = pytester_run(tmp_path, "--nnbench-backend", "cpu", f"--nnbench-save={tmp_path / 'r.csv'}",
                     env={"XDG_CONFIG_HOME": str(tmp_path)}, source=readme_plugin_example())
    assert p.returncode == 0 and "1 passed" in p.stdout, p.stdout[-2000:] + p.stderr
    assert "1 record saved to" in p.stdout, p.stdout[-2000:]


@no_gpu
def test_the_gate_of_gpu_kernels_is_refused_on_the_cpu_before_anything_runs(tmp_path):
    """configs/ci.yaml has no CPU variant: on the CPU, `check --run` would write a file of SKIP rows and then ask
    for a baseline of 10 such runs. One line instead, naming what runs where, and no file."""
    out = tmp_path / "ci.csv"
    res = run("check", "--run", "configs/ci.yaml", "--out", out)
    errors = [ln for ln in res.output.splitlines() if ln.startswith("nnbench: error")]
    assert res.exit_code == 2 and len(errors) == 1, res.output
    assert "--run configs/ci.yaml" in errors[0] and "cpu backend" in errors[0] and "GPU" in errors[0], errors[0]
    assert not out.exists()
    res = run("check", "--run", "examples/vector_add/vector_add.yaml", "--backend", "cpu", "--out", out)
    assert "runs on the cpu backend" not in res.output and out.exists(), res.output  # a kernel config's reference


@no_gpu
def test_a_sweep_of_gpu_kernels_on_the_cpu_says_why_nothing_ran(tmp_path):
    """`nnbench sweep configs/gemm_sweep.yaml` on a machine without a GPU: every case is a SKIP row, and the only
    word was '480 skipped for this device'. One line says that none runs on this backend and what does."""
    res = run("sweep", "configs/gemm_sweep.yaml", "--out", tmp_path / "s.csv")
    assert res.exit_code == 0, res.output
    line = next((ln for ln in res.output.splitlines() if "none of its variants runs" in ln), "")
    assert "configs/gemm_sweep.yaml" in line and "cpu backend" in line and "--compile-only" in line, res.output
    res = run("sweep", "examples/vector_add/vector_add.yaml", "--out", tmp_path / "v.csv")
    assert res.exit_code == 0 and "none of its variants runs" not in res.output, res.output
