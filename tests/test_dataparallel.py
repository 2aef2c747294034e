"""Data-parallel training on the CPU: MPI ranks (started by mpirun, 2-4 of them on the 2-core CI
machine) give the single-process result; nnbench starts mpirun itself for --ranks N; bad input is
one line and exit 2. Skipped where mpirun or mpi4py is missing (.ci/run installs both)."""

import csv
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from nnbench.cli import cli

from .conftest import assert_ranks_match_one_process, mpirun_python, needs_mpi

HERE = Path(__file__).parent


@needs_mpi
@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_ranks_give_the_single_process_result(tmp_path, ranks):
    """Same global batch (96), same data and initial weights: the ranks' summed gradients equal
    the single process's to float32 rounding."""
    res = mpirun_python(ranks, str(HERE / "mpi" / "train_ranks.py"), str(tmp_path / "w.npz"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert_ranks_match_one_process(tmp_path / "w.npz")


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
    res = mpirun_python(2, str(script))
    assert res.returncode != 0
    assert "rank 1: --gpus 3" in res.stdout + res.stderr
