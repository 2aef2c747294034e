"""CLI behaviour through CliRunner: one-line errors with exit code 2, the CPU path end to end,
and exit code 1 on a failed verification."""

import csv

import pytest
from click.testing import CliRunner

from nnbench import results
from nnbench.cli import cli
from nnbench.runtime.device import for_arch
from nnbench.workloads.gemm import session as gemm_suite

from .conftest import gpu_available


def run(*args):
    return CliRunner().invoke(cli, list(args))


def one_line_error(res, *needles):
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("nnbench: error:"), res.output
    assert "Traceback" not in res.output
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.mark.parametrize("args, needles", [
    (["gemm", "--variant", "bogus"], ["--variant bogus", "naive", "tf32x3"]),
    (["gemm", "-v", "tiled", "--ts", "64"], ["--ts 64", "{8, 16, 32}"]),
    (["gemm", "-v", "coarsened", "--ts", "16", "--wpt", "32"], ["TS % WPT == 0", "TS=16", "WPT=32"]),
    (["gemm", "-v", "coarsened", "--wpt", "3"], ["--wpt 3", "{1, 2, 4, 8, 16, 32}"]),
    (["gemm", "-v", "naive", "--wpt", "8"], ["--wpt 8", "coarsened"]),
    (["gemm", "--size", "0"], ["--size", ">=1"]),
    (["gemm", "--m", "-3", "--n", "4", "--k", "4"], ["--m"]),
    (["gemm", "--m", "10"], ["--m, --n and --k"]),
    (["gemm", "--size", "65536"], ["32-bit index"]),
    (["gemm", "--ts", "abc"], ["--ts", "abc"]),
    (["gemm", "--backend", "tpu"], ["--backend", "cuda"]),
    (["gemm", "--budget", "0"], ["--budget"]),
    (["nosuch"], ["nosuch"]),
    (["sweep", "configs/nope.yaml"], ["configs/nope.yaml: no such config file"]),
    (["sweep", "configs/gemm.yaml"], ["configs/gemm.yaml:", "unknown key 'sizes'"]),
    (["sweep", "configs/ci.yaml", "--arch", "sm_90"], ["--arch applies only with --compile-only"]),
    (["sweep", "configs/ci.yaml", "--compile-only", "--arch", "hopper"], ["--arch hopper", "sm_90"]),
    (["sweep", "configs/ci.yaml", "--fresh", "--out", "configs/ci.yaml"], ["--fresh would overwrite"]),
    (["sweep", "configs/ci.yaml", "--jobs", "0"], ["--jobs"]),
    # refused before the plan table is printed: the one line is all the output
    (["sweep", "configs/ci.yaml", "--compile-only", "--replay", "configs/ci.yaml"], ["--replay and --compile-only"]),
    (["sweep", "configs/ci.yaml", "--replay", "nope.csv"], ["--replay nope.csv: no such file"]),
    (["sweep", "configs/ci.yaml", "--mpi", "--gpus", "2"], ["--mpi and --gpus are exclusive"]),
    (["sweep", "configs/ci.yaml", "--backend", "cpu", "--gpus", "x"], ["--gpus x", "all or a number"]),
    (["sweep", "configs/ci.yaml", "--workload", "pool"], ["--workload pool", "gemm, train, conv, kernel"]),
    (["sweep", "configs/ci.yaml", "--workload", "kernel"], ["--workload kernel", "no such part", "gemm, train, conv"]),
    (["train", "--net", "9"], ["--net 9", "1, 2, 3, 4, 5, 6, 7, 8"]),
    (["train", "--layers", "120,x,7"], ["--layers 120,x,7", "comma-separated"]),
    (["train", "--layers", "120"], ["--layers 120", "at least an input and an output"]),
    (["train", "--net", "1", "--layers", "60,7"], ["--net and --layers"]),
    (["train", "--net", "1", "--rate", "0"], ["--rate 0", "> 0"]),
    (["train", "--net", "1", "--momentum", "1"], ["--momentum 1", "[0, 1)"]),
    (["train", "--net", "1", "--momentum", "-0.1"], ["--momentum -0.1", "[0, 1)"]),
    (["train", "--net", "1", "--encoding", "120"], ["--encoding 120", "input width 60"]),
    (["train", "--net", "1", "--encoding", "64"], ["--encoding 64", "60, 120"]),
    (["train", "--layers", "100,20,7"], ["100 inputs", "60 or 120"]),
    (["train", "--layers", "60,20,8"], ["8 outputs", "7-bit"]),
    (["train", "--net", "1", "-v", "turbo"], ["--variant turbo", "kcm-mass"]),
    (["train", "--net", "1", "--init-scale", "0"], ["--init-scale 0", "> 0"]),
    (["train", "--net", "1", "--init", "he"], ["--init he", "glorot, centered"]),
    (["train", "--net", "1", "--batch", "256", "-v", "kcm"], ["--variant kcm", "one sample at a time",
                                                            "batched, batched-cublas"]),
    (["train", "--net", "1", "-v", "batched", "-v", "kcm"], ["--variant kcm", "one sample at a time"]),
    (["train", "--net", "1", "--batch", "256", "--tolerance", "1e-3"], ["--tolerance", "--epochs"]),
    (["train", "--net", "1", "--epochs", "3"], ["--epochs", "--batch B > 1"]),
    (["train", "--net", "1", "--batch", "0"], ["--batch", "0"]),
    (["train", "--net", "1", "--batch", "512", "--train-samples", "100", "--backend", "cpu"],
     ["--train-samples 100", "one batch of 512"]),
])
def test_bad_input_is_one_line_exit_2(args, needles):
    one_line_error(run(*args), *needles)


def test_device_limits_are_refused():
    """Parameter sets that pass the rules but not the device: static shared memory over 48 KiB."""
    from nnbench.errors import NnbenchError
    big = {"BM": 256, "BN": 256, "BK": 32, "WM": 128, "WN": 128, "WNITER": 2}
    with pytest.raises(NnbenchError, match=r"66,048 bytes of static shared memory.*49,152"):
        gemm_suite.plan(["warptile"], big, for_arch("sm_90"))


@pytest.mark.skipif(gpu_available(), reason="this machine has a GPU")
def test_no_gpu_says_how_to_install():
    one_line_error(run("gemm", "--size", "64", "--backend", "cuda"), "bash scripts/setup", "--backend cpu")


def test_auto_says_in_one_line_what_it_runs_and_why(tmp_path):
    pytest.importorskip("nnbench.runtime.cpu")
    from nnbench.runtime import device_count
    if device_count():
        pytest.skip("a GPU is present: auto takes it")
    res = CliRunner().invoke(cli, ["gemm", "--backend", "auto", "--size", "64", "--budget", "0.01", "--csv",
                                   str(tmp_path / "x.csv")])
    lines = res.output.splitlines()
    assert lines[0].startswith("nnbench: backend cpu (no GPU: ") and "scripts/setup" not in lines[0], lines[0]
    assert lines[1].startswith("CPU backend: NumPy float32 on ") and "None" not in lines[1], lines[1]


def test_cpu_path_table_and_csv(tmp_path):
    path = tmp_path / "out.csv"
    res = run("gemm", "--backend", "cpu", "--size", "67", "--size", "33", "--budget", "0.01", "--csv", str(path))
    assert res.exit_code == 0, res.output
    assert "numpy" in res.output and "PASS" in res.output and "cuBLAS: not available" in res.output
    rows = list(csv.DictReader(path.open()))
    assert list(rows[0].keys()) == results.FIELDS
    assert [r["shape"] for r in rows] == ["67×67×67", "33×33×33"]
    for r in rows:
        assert r["status"] == "PASS" and float(r["rel_err"]) < 1e-6 and float(r["median_ms"]) > 0
        assert r["nnbench_version"] and r["git_sha"] and r["timestamp"] and r["backend"] == "cpu"
        assert int(r["samples"]) >= 10


def test_auto_backend_says_it_fell_back(tmp_path):
    if gpu_available():
        pytest.skip("this machine has a GPU")
    res = run("gemm", "--backend", "auto", "--size", "16", "--budget", "0.01", "--csv", str(tmp_path / "a.csv"))
    assert res.exit_code == 0 and "nnbench: backend cpu (no GPU: " in res.output


def test_failed_verification_exits_1_and_keeps_results(tmp_path):
    path = tmp_path / "f.csv"
    res = run("gemm", "--backend", "cpu", "--size", "50", "--budget", "0.01", "--rtol", "1e-15", "--csv", str(path))
    assert res.exit_code == 1, res.output
    assert "FAIL" in res.output
    rows = list(csv.DictReader(path.open()))
    assert rows[0]["status"] == "FAIL"


def test_help_and_version():
    assert run("--version").exit_code == 0
    res = run("gemm", "--help")
    assert res.exit_code == 0 and "--ts" in res.output and "--wpt" in res.output and "--min-blocks" in res.output


def test_sweep_dry_run_needs_no_gpu():
    res = run("sweep", "configs/gemm_sweep.yaml", "--dry-run")
    assert res.exit_code == 0, res.output
    assert "coarsened" in res.output and "restricted" in res.output and "total" in res.output


def test_sweep_workload_keeps_only_that_workloads_parts():
    """`sweep --workload conv` plans configs/sanitize.yaml's convolution part alone (a sanitizer run bounded in time
    then reaches it: the sweep's cases run in the config's order)."""
    whole = run("sweep", "configs/sanitize.yaml", "--dry-run")
    conv = run("sweep", "configs/sanitize.yaml", "--dry-run", "--workload", "conv")
    assert whole.exit_code == 0 and conv.exit_code == 0, (whole.output, conv.output)
    assert "tf32x3_wgmma" in whole.output and "lenet5" in whole.output
    assert "lenet5" in conv.output and "tf32x3_wgmma" not in conv.output and "kcm-mass" not in conv.output


def test_sweep_on_the_cpu_backend(tmp_path):
    cfg = tmp_path / "s.yaml"
    cfg.write_text("name: t\nsuite: gemm\nshapes: [[9, 8, 7]]\ntiming: {budget: 0.01}\nvariants: {numpy: }\n")
    res = run("sweep", str(cfg), "--backend", "cpu", "--out", str(tmp_path / "r.csv"))
    assert res.exit_code == 0, res.output
    assert "★ numpy" in res.output and "host clock" in res.output
    again = run("sweep", str(cfg), "--backend", "cpu", "--out", str(tmp_path / "r.csv"))
    assert "ran 0 cases" in again.output and "1 resumed" in again.output


def test_train_sequential_on_the_cpu(tmp_path):
    path = tmp_path / "t.csv"
    res = run("train", "--net", "1", "--backend", "cpu", "--max-iterations", "104", "--test-per-letter", "2",
              "--csv", str(path))
    assert res.exit_code == 0, res.output
    assert "sequential" in res.output and "A 1000001->" in res.output
    # no terminal here: a plain progress line, not a bar that cannot redraw
    assert "sequential: 52 of 104 it, error " in res.output
    rows = list(csv.DictReader(path.open()))
    assert list(rows[0].keys()) == results.FIELDS
    assert rows[0]["variant"] == "sequential" and rows[0]["workload"] == "train"
    assert rows[0]["iterations"] == "104" and rows[0]["test_samples"] == "104"


def test_train_batched_on_the_cpu(tmp_path):
    path = tmp_path / "b.csv"
    res = run("train", "--net", "1", "--backend", "cpu", "--batch", "100", "--epochs", "2", "--train-samples", "1000",
              "--test-per-letter", "2", "--csv", str(path))
    assert res.exit_code == 0, res.output
    assert "batched-numpy" in res.output and "B = 100" in res.output and "A 1000001->" in res.output
    rows = list(csv.DictReader(path.open()))
    assert list(rows[0].keys()) == results.FIELDS
    r = rows[0]
    assert r["variant"] == "batched-numpy" and r["steps"] == "20" and r["batch"] == "100" and r["status"] == "PASS"
    assert float(r["us_per_step"]) > 0 and 0 <= float(r["test_accuracy"]) <= 1


# -- nnbench soak ---------------------------------------------------------------------------------
def test_the_soak_passes_every_cpu_path_over_fresh_seeds():
    res = run("soak", "--backend", "cpu", "--seeds", "4")
    assert res.exit_code == 0, res.output
    assert "gemm, conv, train · 4 seeds · backend cpu" in res.output and " 0 failed" in res.output


def test_the_soak_finds_a_defect_that_only_some_draws_show_and_names_the_seed(monkeypatch):
    """A planted defect that depends on the data (the NumPy GEMM off by 1e-4 where A's first element is above 0.9:
    a few draws in ten) fails some seeds; each failure's command, run alone, fails again, and a passing seed passes."""
    import re

    from .soak_planted import flaky_launcher
    monkeypatch.setattr(gemm_suite, "_numpy_launcher", flaky_launcher(gemm_suite._numpy_launcher))
    res = run("soak", "--backend", "cpu", "--workload", "gemm", "--seeds", "40")
    assert res.exit_code == 1, res.output
    failed = sorted({int(s) for s in re.findall(r"again: nnbench soak --workload gemm --backend cpu --seed (\d+)",
                                                  res.output)})
    assert failed and len(failed) < 40 and all(f"seed {s}:" in res.output for s in failed), res.output
    again = run("soak", "--backend", "cpu", "--workload", "gemm", "--seed", str(failed[0]))
    assert again.exit_code == 1 and f"seed {failed[0]}:" in again.output
    passing = next(s for s in range(1000) if s not in failed and run(
        "soak", "--backend", "cpu", "--workload", "gemm", "--seed", str(s)).exit_code == 0)
    assert passing not in failed
