"""Change points in a case's series over commits: E-divisive means, from Apache Otava (the maintained successor
of MongoDB's Hunter; `pip install -e '.[history]'`).

Otava splits the series in sliding windows with E-divisive (Matteson and James's energy-statistics
divisive method), then merges back every candidate that a two-sample t-test between its neighbouring segments
does not support at `max_pvalue`, or whose change is smaller than `min_change` (Fleming et al., "Hunter: using
change point detection to hunt for performance regressions", ICPE 2023). No permutations: the same series
always gives the same answer, which a gate needs.

The defaults were chosen on synthetic 100-commit series with 1% noise (lab/scripts/history_changepoints.py writes
the figures in docs/HISTORY.md): p < 0.00001 and a change of at least 2%.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from nnbench.errors import NnbenchError

MAX_PVALUE = 0.00001
MIN_CHANGE = 0.02
WINDOW = 50  # commits per E-divisive window (Otava's default)


@dataclass(frozen=True)
class ChangePoint:
    index: int  # the first point of the new segment
    pvalue: float
    before: float  # the mean of the segment before it
    after: float  # and after it

    @property
    def change(self) -> float:
        return self.after / self.before - 1 if self.before else math.nan


def detect(values, max_pvalue: float = MAX_PVALUE, min_change: float = MIN_CHANGE) -> list[ChangePoint]:
    """The change points of `values` (one number per commit, in history order), earliest first."""
    try:
        from otava.analysis import compute_change_points
    except ImportError:
        raise NnbenchError("change points need Apache Otava; install it with: pip install -e '.[history]'") from None
    series = [float(v) for v in values]
    if len(series) < 3:
        return []
    found, _weak = compute_change_points(series, window_len=WINDOW, max_pvalue=max_pvalue, min_magnitude=min_change)
    return [ChangePoint(int(c.index), float(c.stats.pvalue), float(c.stats.mean_1), float(c.stats.mean_2))
            for c in sorted(found, key=lambda c: c.index)]
