"""Data-parallel training on the CPU: MPI ranks (started by mpirun, 2-4 of them on the 2-core CI
machine) give the single-process result; nnbench starts mpirun itself for --ranks N; bad input is
one line and exit 2. Skipped where mpirun or mpi4py is missing (.ci/run installs both)."""

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from nnbench import glyphs, nets
from nnbench.cli import cli
from nnbench.suites import batched, mlp

HERE = Path(__file__).parent


def _mpi_ready() -> bool:
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return shutil.which("mpirun") is not None


needs_mpi = pytest.mark.skipif(not _mpi_ready(), reason="mpirun or mpi4py is not installed")


def _mpirun(n: int, *args: str) -> subprocess.CompletedProcess:
    cmd = ["mpirun", "-np", str(n), "--oversubscribe"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    return subprocess.run([*cmd, sys.executable, "-m", "mpi4py", *args], capture_output=True, text=True, timeout=300)


@needs_mpi
@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_ranks_give_the_single_process_result(tmp_path, ranks):
    """Same global batch (96), same data and initial weights: the ranks' summed gradients equal
    the single process's to float32 rounding."""
    res = _mpirun(ranks, str(HERE / "mpi" / "train_ranks.py"), str(tmp_path / "w.npz"))
    assert res.returncode == 0, res.stdout + res.stderr
    got = np.load(tmp_path / "w.npz")
    layers = nets.get(1).layers
    init = mlp.init_params(layers, 0, 4.0)
    one = batched.train_numpy(layers, init, batched.training_set(layers[0], 960, seed=0), glyphs.noisy(60, 1, seed=1),
                              96, 2, mlp.Hyper(rate=3.0, momentum=0.8))
    np.testing.assert_allclose(got["curve"], [e for _, e in one.error_curve], rtol=1e-4)
    assert mlp.weight_change_error([got[f"arr_{i}"] for i in range(len(init))], one.weights, init) < 1e-4


@needs_mpi
def test_cli_starts_the_ranks_itself(tmp_path):
    path = tmp_path / "dp.csv"
    res = CliRunner().invoke(cli, ["train", "--backend", "cpu", "--net", "1", "--batch", "64", "--epochs", "1",
                                   "--train-samples", "640", "--ranks", "2", "--no-letters", "--csv", str(path)])
    assert res.exit_code == 0, res.output
    row = next(csv.DictReader(path.open()))
    assert row["ranks"] == "2" and row["exchange"] == "mpi" and row["status"] == "PASS" and row["steps"] == "10"


@pytest.mark.parametrize("args, needles", [
    (["--batch", "66", "--ranks", "4"], ["--batch 66", "multiple of 4"]),
    (["--ranks", "2"], ["--gpus", "--batch B > 1"]),
    (["--batch", "64", "--allreduce", "nccl"], ["--allreduce nccl", "--gpus N > 1"]),
    (["--batch", "64", "--gpus", "64", "--backend", "cuda"], ["--gpus 64", "GPU(s)"]),
])
def test_bad_data_parallel_input_is_one_line(args, needles):
    res = CliRunner().invoke(cli, ["train", "--net", "1", *args])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("nnbench: error:"), res.output
    for n in needles:
        assert n in lines[0]


def test_missing_mpirun_is_one_line(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    res = CliRunner().invoke(cli, ["train", "--backend", "cpu", "--net", "1", "--batch", "64", "--ranks", "2"])
    assert res.exit_code == 2 and "needs mpirun or mpiexec" in res.output, res.output


@needs_mpi
def test_a_dying_rank_fails_the_run_and_names_itself(tmp_path):
    """Rank 1 gets an input it refuses (its own --gpus disagrees with the world): the whole job
    stops with a non-zero status instead of leaving rank 0 waiting, and the line names the rank."""
    script = tmp_path / "die.py"
    script.write_text("import os, sys\nfrom nnbench.cli import cli\n"
                      "extra = ['--gpus', '3'] if os.environ.get('OMPI_COMM_WORLD_RANK') == '1' else []\n"
                      "cli(['train', '--backend', 'cpu', '--net', '1', '--batch', '64', '--epochs', '1', "
                      "'--train-samples', '640', '--no-letters', '--csv', os.devnull, *extra])\n")
    res = _mpirun(2, str(script))
    assert res.returncode != 0
    assert "rank 1: --gpus 3" in res.stdout + res.stderr
