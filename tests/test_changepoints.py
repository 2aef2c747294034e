"""E-divisive's Q-hat (nnbench/history/changepoints.py, from prefix sums) against its definition in Matteson and
James (2014), summed pair by pair."""

import itertools

import numpy as np
import pytest

from nnbench.history import changepoints


def qhat_by_definition(x: np.ndarray) -> tuple[int, float]:
    best = (0, -np.inf)
    for tau in range(1, len(x)):
        for kappa in range(tau + 1, len(x) + 1):
            a, b = x[:tau], x[tau:kappa]
            n, m = len(a), len(b)
            between = np.abs(a[:, None] - b[None, :]).mean()
            within_a = np.mean([abs(p - q) for p, q in itertools.combinations(a, 2)]) if n > 1 else 0.0
            within_b = np.mean([abs(p - q) for p, q in itertools.combinations(b, 2)]) if m > 1 else 0.0
            q = m * n / (m + n) * (2 * between - within_a - within_b)
            if q > best[1] + 1e-12:
                best = (tau, q)
    return best


@pytest.mark.parametrize("seed", range(20))
def test_qhat_is_the_energy_statistic(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=int(rng.integers(2, 14)))
    x = x + (np.arange(len(x)) >= rng.integers(1, len(x) + 1)) * rng.choice([0.0, 2.0])
    tau, q = changepoints._qhat(x)
    want_tau, want_q = qhat_by_definition(x)
    assert (tau, q) == (want_tau, pytest.approx(want_q, rel=1e-9, abs=1e-12))


def test_a_short_or_constant_history_has_no_change_point():
    assert changepoints.detect([1.0, 2.0]) == []
    # Constant segments give the t-test a p of nan, read as no evidence: not even a weak candidate is kept.
    assert changepoints._split(np.ones(60), 1e-4) == []
    assert changepoints.detect([1.0] * 60) == []
