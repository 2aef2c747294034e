"""Each case's series over commits, its change points, and its last stable segment (everything after the last
change point: the history a new run is compared with)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from nnbench.history import changepoints
from nnbench.history.changepoints import ChangePoint


@dataclass
class Trend:
    gpu: str
    key: str
    workload: str
    variant: str
    params: str
    shape: str
    points: pd.DataFrame  # one row per commit, history order: commit, at, median_ms, iqr_ms, runs, samples
    change_points: list[ChangePoint] = field(default_factory=list)

    @property
    def commits(self) -> list[str]:
        return list(self.points["commit"])

    @property
    def values(self) -> np.ndarray:
        return self.points["median_ms"].to_numpy(dtype=np.float64)

    @property
    def stable_from(self) -> int:
        """The index of the first commit of the last stable segment."""
        return self.change_points[-1].index if self.change_points else 0

    @property
    def stable(self) -> pd.DataFrame:
        return self.points.iloc[self.stable_from:]

    @property
    def label(self) -> str:
        return " ".join(x for x in (self.variant, self.params, self.shape) if x)


def trends(points: pd.DataFrame, max_pvalue: float = changepoints.MAX_PVALUE,
           min_change: float = changepoints.MIN_CHANGE) -> list[Trend]:
    """One Trend per (GPU, case) of `points` (store.points), with its change points."""
    out = []
    if points.empty:
        return out
    for (gpu, key), g in points.groupby(["gpu", "key"], sort=True):
        g = g.reset_index(drop=True)
        first = g.iloc[0]
        t = Trend(str(gpu), str(key), str(first["workload"] or ""), str(first["variant"] or ""),
                  str(first["params"] or ""), str(first["shape"] or ""), g)
        t.change_points = changepoints.detect(t.values, max_pvalue, min_change)
        out.append(t)
    return out
