"""`nnbench train` and `nnbench conv --model` run through harness.run like `gemm`: the command parses
options into cases and problems, and the workload's session trains and measures (no trainer's own
loop behind the harness's back)."""

import ast
import csv
from pathlib import Path

from click.testing import CliRunner

from nnbench import harness
from nnbench.cli import cli

CLI = Path(__file__).parent.parent / "nnbench" / "cli"
TRAINERS = {"mlp", "batched", "batched_mod", "lenet", "ddp", "fused"}


def _recording(monkeypatch, real: bool):
    """harness.run, recorded (workload, variants, problems); the real run behind it, or no rows."""
    calls = []
    through = harness.run

    def run(workload, backend, cases, problems, *args, **kwargs):
        calls.append((workload.name, [c.variant.name for c in cases], list(problems)))
        return through(workload, backend, cases, problems, *args, **kwargs) if real else iter(())
    monkeypatch.setattr(harness, "run", run)
    return calls


def test_train_runs_through_the_harness(tmp_path, monkeypatch):
    calls = _recording(monkeypatch, real=True)
    for i, extra in enumerate(([], ["--batch", "100", "--epochs", "1", "--train-samples", "200"])):
        path = tmp_path / f"t{i}.csv"
        res = CliRunner().invoke(cli, ["train", "--net", "1", "--backend", "cpu", "--test-per-letter", "2",
                                       "--csv", str(path), *(extra or ["--max-iterations", "52"])])
        assert res.exit_code == 0, res.output
        assert next(csv.DictReader(path.open()))["status"] == "PASS"
    assert [(name, variants, [p.batch for p in problems]) for name, variants, problems in calls] == [
        ("train", ["sequential"], [1]), ("train", ["batched-numpy"], [100])]


def test_conv_model_runs_through_the_harness(tmp_path, monkeypatch):
    """On a stand-in for the GPU (no rows come back): the command hands LeNet-5's paths to the harness."""
    from nnbench.cli import conv as conv_cli

    class Device:
        name = "cuda"

        def environment(self):
            return {"backend": "cpu", "gpu": "stand-in"}
    monkeypatch.setattr(conv_cli, "open_device", lambda backend: Device())
    calls = _recording(monkeypatch, real=False)
    res = CliRunner().invoke(cli, ["conv", "--model", "lenet5", "--n", "8", "--csv", str(tmp_path / "c.csv")])
    assert res.exit_code == 0, res.output
    (name, variants, problems), = calls
    assert (name, variants, [p.batch for p in problems]) == ("conv", ["lenet5", "lenet5-implicit"], [8])


def test_the_commands_call_no_trainer_loop():
    """Neither command calls a trainer's `run` (mlp.run, batched.run, lenet.run) itself."""
    for name in ("train.py", "conv.py"):
        tree = ast.parse((CLI / name).read_text())
        calls = [f"{n.func.value.id}.run" for n in ast.walk(tree) if isinstance(n, ast.Call)
                 and isinstance(n.func, ast.Attribute) and n.func.attr == "run"
                 and isinstance(n.func.value, ast.Name) and n.func.value.id in TRAINERS]
        assert not calls, (name, calls)
