"""One PNG per case: its median per commit (bars: the interquartile range), each stable segment's median, and
the change points, labelled with their commit and change. The figures are views of the database, drawn anew on
every `history show` (a file of the same case is replaced, atomically)."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import numpy as np

from nnbench import results
from nnbench.errors import NnbenchError
from nnbench.history.trend import Trend

NAME_CHARS = 150  # of the case's part of a file name


def file_name(t: Trend) -> str:
    """<gpu>--<case>.png. A case's slug past NAME_CHARS keeps its start and a digest of the whole key in place of the
    rest: cut alone, two cases whose long parameters agree would share a file (step 9's rows at 1000x777x1234 lost
    their shape in session 7's history PNGs), and one figure would replace the other."""
    case = results.slug(t.key.replace("|", " "))
    if len(case) > NAME_CHARS:
        case = f"{case[:NAME_CHARS - 13]}--{hashlib.sha1(t.key.encode()).hexdigest()[:11]}"
    return f"{results.slug(t.gpu)}--{case}.png"


def figure(t: Trend, title: str = ""):
    from nnbench.report.plots import DPI, PALETTE, _plt
    plt = _plt()
    fig = plt.figure(figsize=(9.0, 4.5), dpi=DPI, layout="constrained")
    try:
        ax = fig.add_subplot()
        x = np.arange(len(t.points))
        y = t.values
        half = t.points["iqr_ms"].fillna(0).to_numpy(dtype=np.float64) / 2
        ax.errorbar(x, y, yerr=half, fmt="o", ms=3.5, color=PALETTE[0], ecolor="#9bbcd6", elinewidth=1,
                    label="median per commit (bar: IQR)")
        bounds = [0] + [c.index for c in t.change_points] + [len(x)]
        for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
            ax.hlines(float(np.median(y[lo:hi])), lo - 0.4, hi - 0.6, colors=PALETTE[1], linewidth=2,
                      label="segment median" if i == 0 else None)
        for c in t.change_points:
            ax.axvline(c.index - 0.5, color=PALETTE[3], linestyle="--", linewidth=1.2)
            ax.annotate(f"{t.commits[c.index][:9]}\n{100 * c.change:+.1f}%", (c.index - 0.5, 1), xycoords=("data",
                        "axes fraction"), xytext=(4, -4), textcoords="offset points", va="top", fontsize=8,
                        color=PALETTE[3])
        step = max(1, len(x) // 10)
        ax.set_xticks(x[::step], [s[:7] for s in t.commits[::step]], rotation=30, ha="right", fontsize=8)
        ax.set_xlabel(f"commit (history order, {len(x)} commits)")
        ax.set_ylabel("median ms")
        found = (f"{len(t.change_points)} change point{'s' if len(t.change_points) != 1 else ''}"
                 if t.change_points else "no change point")
        ax.set_title(title or f"{t.label} · {t.gpu} · {found}", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    except BaseException:
        plt.close(fig)
        raise
    return fig


def write(t: Trend, folder: Path, title: str = "") -> Path:
    from nnbench.report.plots import png_bytes
    data = png_bytes(figure(t, title))
    target = Path(folder) / file_name(t)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-", suffix=".png")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, target)  # a reader sees the old figure or the new one, never half of one
    except OSError as e:
        raise NnbenchError(f"{target}: cannot write: {e.strerror or e}") from None
    return target
