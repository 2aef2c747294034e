"""Scaling runs (`nnbench train --ranks 1,2`), the split of a data-parallel step, and the multi-node path
(mpirun with a host file), on the CPU backend: at most 2 MPI ranks on the 2-core machine, oversubscribed."""

import csv
import subprocess
import sys

import pytest
from click.testing import CliRunner

from nnbench import paths
from nnbench.cli import cli
from nnbench.cli import scaling as scaling_runs
from nnbench.report import scaling

from .conftest import mpirun_cmd, needs_mpi

TRAIN = ["train", "--backend", "cpu", "--net", "1", "--epochs", "1", "--train-samples", "640", "--no-letters"]


def row(version, ranks, batch, us, status="PASS"):
    return dict(version=version, ranks=str(ranks), batch=str(batch), us_per_step=str(us), status=status)


def test_efficiency_is_against_one_rank_at_the_right_batch():
    """Weak: the one-rank step at the per-rank batch; strong: the one-rank step at the same global batch,
    over N steps' worth; DDP against PyTorch eager; no reference, no number."""
    rows = scaling.add_efficiency([
        row("batched", 1, 100, 1000.0), row("batched", 1, 400, 3600.0),
        row("batched", 4, 400, 1250.0),  # weak against B=100, strong against B=400
        row("batched", 2, 200, 1100.0),  # weak only: no one-rank run at 200
        row("torch-eager", 1, 100, 3000.0), row("torch-ddp", 4, 400, 5000.0),
        row("batched-cublas", 1, 100, 900.0, status="FAIL"), row("batched-cublas", 4, 400, 1000.0),
    ])
    by = {(r["version"], r["ranks"], r["batch"]): r for r in rows}
    four = by[("batched", "4", "400")]
    assert four["weak_eff"] == pytest.approx(1000 / 1250) and four["strong_eff"] == pytest.approx(3600 / (4 * 1250))
    two = by[("batched", "2", "200")]
    assert two["weak_eff"] == pytest.approx(1000 / 1100) and two["strong_eff"] is None
    assert by[("torch-ddp", "4", "400")]["weak_eff"] == pytest.approx(3000 / 5000)
    assert by[("batched-cublas", "4", "400")]["weak_eff"] is None  # its reference failed its check
    assert by[("batched", "1", "100")]["weak_eff"] == 1.0


def test_the_runs_of_a_scaling_run():
    assert scaling_runs.plan((1, 2, 4), 100, None) == [(1, 100), (2, 200), (4, 400)]
    assert scaling_runs.plan((1, 2, 4), 100, 400) == [(1, 100), (2, 200), (4, 400), (1, 400), (2, 400)]
    argv = ["train", "--net", "8", "--gpus", "1,2", "--batch=64", "--bucket-mb", "0", "--strong", "--csv", "x.csv",
            "--allreduce=nccl", "-v", "batched", "--force", "--json", "x.jsonl"]
    assert scaling_runs.child_argv(argv, 1, 64, "a.csv") == ["train", "--net", "8", "-v", "batched", "--batch", "64",
                                                             "--csv", "a.csv"]
    assert scaling_runs.child_argv(argv, 2, 128, "b.csv") == ["train", "--net", "8", "--bucket-mb", "0",
                                                              "--allreduce=nccl", "-v", "batched", "--batch", "128",
                                                              "--csv", "b.csv", "--gpus", "2"]


@needs_mpi
def test_a_scaling_run_measures_every_count_in_one_call(tmp_path):
    """--ranks 1,2 --strong: 1 rank at 32 and at 64, 2 ranks at 64 (32 each); one CSV with every row's rank
    count, efficiencies from those rows' own steps, and every rank's split of its step. --bucket-mb goes to
    the 2-rank run only (one rank refuses it)."""
    path = tmp_path / "scaling.csv"
    res = CliRunner().invoke(cli, [*TRAIN, "--batch", "32", "--ranks", "1,2", "--strong", "--bucket-mb", "0",
                                   "--csv", str(path)])
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader(path.open()))
    runs = {(r["ranks"], r["batch"]): r for r in rows}
    assert sorted(runs) == [("1", "32"), ("1", "64"), ("2", "64")], runs
    t = {k: float(r["us_per_step"]) for k, r in runs.items()}
    two = runs[("2", "64")]
    assert float(two["weak_eff"]) == pytest.approx(t[("1", "32")] / t[("2", "64")])
    assert float(two["strong_eff"]) == pytest.approx(t[("1", "64")] / (2 * t[("2", "64")]))
    assert two["exchange"] == "mpi" and two["params"] == "one allreduce after the backward pass"
    for key in ("rank_us_per_step", "rank_kernels_us", "rank_exposed_us", "rank_rest_us"):
        assert len(two[key].split()) == 2, (key, two[key])
    split = float(two["kernels_us"]) + float(two["rest_us"]) + float(two["exposed_us"])
    assert split == pytest.approx(float(two["us_per_step"]))
    assert float(two["kernels_us"]) > 0 and float(two["exposed_us"]) >= 0
    assert "weak eff." in res.output and "CSV:" in res.output


@pytest.mark.parametrize("args, needles", [
    (["--batch", "64", "--strong"], ["--strong", "--gpus 1,2,4"]),
    (["--batch", "64", "--ranks", "2", "--global-batch", "128"], ["--global-batch", "list of counts"]),
    (["--batch", "32", "--ranks", "1,2", "--global-batch", "63"], ["--global-batch 63", "multiple of 2"]),
    (["--batch", "64", "--ranks", "0,2"], ["--gpus 0,2", ">= 1"]),
    (["--batch", "64", "--ranks", "1,x"], ["--gpus 1,x", "comma-separated"]),
    (["--batch", "512", "--ranks", "1,2"], ["--train-samples 640", "1,024"]),
])
def test_bad_scaling_input_is_one_line(args, needles):
    one_line(CliRunner().invoke(cli, [*TRAIN, *args]), needles)


def test_a_scaling_run_needs_mini_batches():
    one_line(CliRunner().invoke(cli, ["train", "--backend", "cpu", "--net", "1", "--ranks", "1,2"]),
             ["--gpus 1,2", "--batch B > 1"])


def one_line(res, needles):
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("nnbench: error:"), res.output
    for n in needles:
        assert n in lines[0], lines[0]


# -- several nodes: mpirun with a host file (two slots of this host stand for two nodes) -----------------
def hostfile(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("localhost slots=2\n")
    return path


@needs_mpi
def test_data_parallel_training_from_a_host_file(tmp_path):
    """The ranks come from the user's mpirun and its host file: nnbench runs as them (no mpirun of its own),
    rank 0 writes the one row, with both ranks' split."""
    out = tmp_path / "dp.csv"
    cmd = [*mpirun_cmd(2, "--hostfile", str(hostfile(tmp_path))), sys.executable, "-m", "mpi4py", "-m", "nnbench",
           *TRAIN, "--batch", "64", "--csv", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=paths.ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 1 and rows[0]["ranks"] == "2" and rows[0]["status"] == "PASS"
    assert len(rows[0]["rank_us_per_step"].split()) == 2


@needs_mpi
def test_an_mpi_sweep_from_a_host_file(tmp_path):
    """`sweep --mpi` over the host file's 2 slots: rank 0 leads, rank 1 runs every case (replayed: no GPU)."""
    cfg = tmp_path / "search.yaml"
    cfg.write_text((paths.ROOT / "configs/gemm_sweep.yaml").read_text() + "strategy: random\nbudget: {cases: 6}\n")
    out = tmp_path / "r.csv"
    cmd = [*mpirun_cmd(2, "--hostfile", str(hostfile(tmp_path))), sys.executable, "-m", "mpi4py.futures", "-m",
           "nnbench", "sweep", str(cfg), "--mpi", "--replay", str(paths.ROOT / "docs/data/figures/gemm_sweep_h100.csv"),
           "--out", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=paths.ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    got = [r for r in csv.DictReader(out.open()) if r["status"] != "SKIP"]
    assert got and all(r["status"] in ("PASS", "REFERENCE") for r in got), got


# -- sharded sweeps: the order of the shared queue, and the overhead per worker ------------------------
def test_several_workers_take_the_largest_shapes_first():
    from types import SimpleNamespace

    from nnbench.sweeps.sweep import longest_first
    from nnbench.sweeps.worker import Job
    small, big, mid = (SimpleNamespace(flops=f) for f in (1e3, 1e9, 1e6))
    jobs = [Job("case", small, "a"), Job("case", big, "b"), Job("case", mid, "c"), Job("case", big, "d")]
    assert [j.case for j in longest_first(jobs)] == ["b", "d", "c", "a"]  # the plan's order within a shape


def test_two_cpu_workers_report_their_own_overhead(tmp_path):
    """--gpus 2 on the CPU backend: each worker's kernel time is set against the run's wall time, on its own:
    the two add up to the sweep's kernel time, and neither overhead is negative."""
    from nnbench.sweeps import sweep

    from .test_sweep import cpu_spec
    spec = cpu_spec(tmp_path, [(32, 32, 32), (96, 96, 96), (64, 64, 64), (48, 48, 48)], budget=0.02)
    outcome = sweep.execute(spec, sweep.RunOptions("cpu", tmp_path / "r.csv", gpus=(0, 1)))
    assert outcome.jobs == 4 and len(outcome.worker_gpu_s) == 2 and min(outcome.worker_gpu_s) > 0
    assert sum(outcome.worker_gpu_s) == pytest.approx(outcome.gpu_s)
    assert outcome.worker_overheads == [pytest.approx(1 - g / outcome.run_s) for g in outcome.worker_gpu_s]
    assert all(0 <= o < 1 for o in outcome.worker_overheads)


@pytest.mark.gpu
def test_a_gpu_scaling_run_splits_every_ranks_step(tmp_path):
    """On 2 GPUs: 1 and 2 GPUs, weak and strong, beside PyTorch; every data-parallel row carries both ranks'
    split, and the split adds up to the step."""
    from nnbench.runtime import device_count
    if device_count() < 2:
        pytest.skip("needs 2 GPUs")
    path = tmp_path / "scaling.csv"
    res = CliRunner().invoke(cli, ["train", "--net", "8", "--batch", "1024", "--gpus", "1,2", "--strong", "-v",
                                   "batched", "--epochs", "1", "--train-samples", "8192", "--no-letters",
                                   "--compare", "torch", "--csv", str(path)])
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader(path.open()))
    ours = [r for r in rows if r["variant"] == "batched" and r["ranks"] == "2"]
    assert len(ours) == 1 and ours[0]["weak_eff"] and ours[0]["strong_eff"]
    two = ours[0]
    assert len(two["rank_kernels_us"].split()) == 2 and two["exchange"] == "nccl"
    split = float(two["kernels_us"]) + float(two["rest_us"]) + float(two["exposed_us"])
    assert split == pytest.approx(float(two["us_per_step"]))
    assert any(r["variant"] == "torch-ddp" and r["weak_eff"] for r in rows)
