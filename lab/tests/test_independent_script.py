"""lab/scripts/independent_baselines.py's paired comparison of the eager row (CPU: the arithmetic only)."""

import importlib.util
from pathlib import Path

import numpy as np

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "independent_baselines.py"  # lab/scripts


def _script():
    spec = importlib.util.spec_from_file_location("independent_baselines", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _drifting_pairs(bias: float, n: int = 36) -> list[tuple[float, float]]:
    """Pairs that share a host drifting by +-15% over time, nnbench's side off by `bias`."""
    rng = np.random.default_rng(1)
    host = 4.0 * (1 + 0.15 * np.sin(np.arange(n) / 3.0))
    return [(h * (1 + bias) * rng.normal(1, 0.03), h * rng.normal(1, 0.03)) for h in host]


def test_paired_ratio_sees_through_the_hosts_drift():
    ib = _script()
    ratio, low, high = ib.paired_ratio(_drifting_pairs(0.0))
    assert low <= 1.0 <= high and abs(ratio - 1) < 0.03 and high - low < 0.06


def test_paired_ratio_catches_a_five_percent_bias():
    ib = _script()
    ratio, low, high = ib.paired_ratio(_drifting_pairs(0.05))
    assert low > 1.0 and abs(ratio - 1.05) < 0.03


def test_read_pairs(tmp_path):
    ib = _script()
    path = tmp_path / "eager_pairs.csv"
    path.write_text("round,pair,nnbench,independent\n0,0,4.1,4.0\n0,1,3.9,4.0\n")
    assert ib.read_pairs(path) == [(4.1, 4.0), (3.9, 4.0)]
    assert ib.read_pairs(tmp_path / "missing.csv") == []


def _rows(**diffs) -> list[dict]:
    return [dict(baseline=name, difference_pct=d) for name, d in diffs.items()]


def test_agreement_judges_the_eager_step_by_its_pairs_alone():
    ib = _script()
    rows = _rows(cudnn=0.7, **{"torch-eager step": -3.5, "torch-eager pairs": -4.2, "torch-graph": -0.6})
    assert ib.agreed(rows, 1.02)  # the eager medians over rounds say where the host was
    assert not ib.agreed(rows, 1.05)  # the pairs see nnbench's eager timer 5% off
    assert not ib.agreed(rows, None)  # no pairs: the eager rows are judged as the others
    assert not ib.agreed(_rows(cudnn=3.5, **{"torch-eager step": 0.0}), 1.0)  # any other row beyond 3%
