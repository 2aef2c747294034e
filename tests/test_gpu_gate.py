"""On the GPU: the gate over more than one suite. A planted slowdown in a training kernel (fused) and
in a convolution kernel (direct), compiled in through NNBENCH_PLANT (kernels_cu/common/plant.cuh), is
caught as SLOWER with exit 1; the same config unchanged passes against the same baseline."""

import csv

import pytest
from click.testing import CliRunner

from nnbench.cli import cli

pytestmark = pytest.mark.gpu

CONFIG = """\
name: gate
seed: 3
timing: {budget: 0.3, min_samples: 10, max_noise: 0.01, watchdog: 120}
parts:
  - suite: train
    vendor: false
    shapes: [{nets: [4], iterations: 6240}]
    variants: {fused: }
  - suite: conv
    vendor: false
    shapes: [[16, 32, 28, 28, 32, 3, 1, 1]]
    variants: {direct: }
"""


def test_gate_catches_planted_slowdowns_in_train_and_conv(cuda_backend, tmp_path, monkeypatch):
    cfg = tmp_path / "gate.yaml"
    cfg.write_text(CONFIG)
    base = tmp_path / "base.csv"
    runner = CliRunner()
    res = runner.invoke(cli, ["sweep", str(cfg), "--out", str(base)])
    assert res.exit_code == 0, res.output
    with open(base) as f:
        rows = list(csv.DictReader(f))
    assert {(r["workload"], r["variant"], r["status"]) for r in rows} == {("train", "fused", "PASS"),
                                                                      ("conv", "direct", "PASS")}
    same = runner.invoke(cli, ["check", "--run", str(cfg), "--baseline", str(base), "--out", str(tmp_path / "a.csv")])
    assert same.exit_code == 0, same.output
    monkeypatch.setenv("NNBENCH_PLANT", "PLANT_SLOWDOWN=256")
    slow = runner.invoke(cli, ["check", "--run", str(cfg), "--baseline", str(base), "--out", str(tmp_path / "b.csv")])
    assert slow.exit_code == 1, slow.output
    lines = [ln for ln in slow.output.splitlines() if "SLOWER" in ln]
    assert any("fused" in ln for ln in lines) and any("direct" in ln for ln in lines), slow.output
