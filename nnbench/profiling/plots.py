"""PNG plots of result CSVs (`nnbench report RESULTS.csv --plot KIND --out file.png`), through
matplotlib, which is an optional extra (`pip install -e '.[plot]'`):
  roofline  every verified case of a run against the device's ceilings;
  speedup   bars of each version's speedup (the seed's chart): GEMM over naive, MLP over sequential;
  heatmap   a TS x WPT sweep of one variant, GFLOP/s per cell.
"""

from __future__ import annotations

import io
import math
import os
from pathlib import Path

import pandas as pd

from nnbench.errors import NnbenchError
from nnbench.profiling.roofline import Roof

KINDS = ("roofline", "speedup", "heatmap")
SIZE_INCHES, DPI = (8.0, 5.0), 100  # 800 x 500 pixels


def _plt():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise NnbenchError("--plot needs matplotlib: pip install -e '.[plot]'") from None
    return plt


NUMERIC = ("flops", "bytes", "median_ms", "gflops", "speedup", "speedup_vs_sequential", "fp32_peak_tflops",
           "dram_peak_gbs")


def png_path(out: Path) -> Path:
    """The file `--out` names: itself if it ends in .png, `out.png` if it has no suffix. Anything
    else, or a suffix-less name that already exists (a device such as /dev/full, a folder), is
    refused rather than guessed at."""
    out = Path(out)
    if out.suffix.lower() == ".png":
        return out
    if out.suffix:
        raise NnbenchError(f"--out {out}: the plot is a PNG; name a .png file")
    if out.exists() or out.is_symlink():
        raise NnbenchError(f"--out {out}: exists and is not a .png file; name a .png file")
    return out.with_name(out.name + ".png")


def plot(df: pd.DataFrame, kind: str, out: Path, title: str = "", force: bool = False) -> Path:
    """Draw `kind` from `df` and write it, as a new file (or, with force, a replaced one), to
    png_path(out); return the path written."""
    from nnbench import safeio
    if kind not in KINDS:
        raise NnbenchError(f"--plot {kind}: choose from {', '.join(KINDS)}")
    target = png_path(out)
    df = df.copy()
    for col in NUMERIC:
        if col in df:
            df[col] = pd.to_numeric(df[col], errors="coerce")
    plt = _plt()
    fig, ax = plt.subplots(figsize=SIZE_INCHES, dpi=DPI)
    try:
        {"roofline": _roofline, "speedup": _speedup, "heatmap": _heatmap}[kind](ax, df)
        if title:
            ax.set_title(title)
        fig.tight_layout()
        image = io.BytesIO()
        fig.savefig(image, format="png", dpi=DPI)
    finally:
        plt.close(fig)
    target, fd = safeio.open_locked(target, safeio.FORCE if force else safeio.NEW)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(image.getvalue())
    except OSError as e:
        raise safeio.os_problem(target, e) from None
    return target


def _ok(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["status"].isin(["PASS"])] if "status" in df else df


def _roofline(ax, df: pd.DataFrame) -> None:
    d = _ok(df).dropna(subset=["flops", "bytes", "median_ms"]) if "flops" in df else pd.DataFrame()
    if d.empty:
        raise NnbenchError("--plot roofline: the CSV has no verified GEMM rows (flops, bytes, median_ms)")
    row = d.iloc[0]
    roof = Roof(float(row["fp32_peak_tflops"]) * 1e12, float(row["dram_peak_gbs"]) * 1e9, "theoretical")
    ai = d["flops"] / d["bytes"]
    perf = d["flops"] / (d["median_ms"] * 1e-3)
    lo, hi = min(ai.min(), roof.ridge) / 4, max(ai.max(), roof.ridge) * 4
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.loglog(xs, [roof.attainable(x) / 1e12 for x in xs], "k-", label=f"roof ({roof.source})")
    d = d.assign(ai=ai, perf=perf)
    colors = {v: f"C{i % 10}" for i, v in enumerate(dict.fromkeys(d["variant"]))}
    markers = {s: "os^vDP*X"[i % 8] for i, s in enumerate(dict.fromkeys(d["shape"]))}
    for (name, shape), g in d.groupby(["variant", "shape"], sort=False):
        ax.loglog(g["ai"], g["perf"] / 1e12, markers[shape], color=colors[name])
    for name, c in colors.items():  # one legend entry per variant, one per shape
        ax.plot([], [], "o", color=c, label=name)
    for shape, m in markers.items():
        ax.plot([], [], m, color="gray", label=shape)
    ax.set_xlabel("arithmetic intensity (FLOP / byte, fewest bytes)")
    ax.set_ylabel(f"TFLOP/s ({row['gpu']})")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(True, which="both", alpha=0.3)


def _speedup(ax, df: pd.DataFrame) -> None:
    d = _ok(df)
    if "speedup_vs_sequential" in d:  # nnbench train
        col, base = "speedup_vs_sequential", "sequential"
        labels, values = d["version"], d[col]
    elif "speedup" in d:
        col, base = "speedup", str(d["speedup_over"].dropna().iloc[0]) if d["speedup_over"].notna().any() else "?"
        d = d.dropna(subset=[col])
        labels, values = d["variant"] + " " + d.get("shape", ""), d[col]
    else:
        raise NnbenchError("--plot speedup: the CSV has no speedup column (a gemm or train result)")
    values = pd.to_numeric(values, errors="coerce")
    keep = values.notna() & values.abs().lt(math.inf) & values.gt(0)
    labels, values = labels[keep], values[keep]
    if values.empty:
        raise NnbenchError(f"--plot speedup: no verified row has a positive finite {col}; nothing to plot")
    ax.bar(range(len(values)), values, color="tab:blue")
    ax.set_xticks(range(len(values)), labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(f"speedup over {base}")
    ax.set_yscale("log" if values.max() / max(values.min(), 1e-9) > 50 else "linear")
    for i, v in enumerate(values):
        ax.text(i, v, f"{v:.1f}×", ha="center", va="bottom", fontsize=7)


def _heatmap(ax, df: pd.DataFrame) -> None:
    d = _ok(df)
    if "params" not in d or d.empty:
        raise NnbenchError("--plot heatmap: the CSV has no verified rows with params")
    p = d["params"].fillna("").str.extract(r"TS=(\d+).*WPT=(\d+)").astype(float)
    d = d.assign(TS=p[0], WPT=p[1]).dropna(subset=["TS", "WPT"])
    if d.empty:
        raise NnbenchError("--plot heatmap: no rows with both TS and WPT (a sweep of `coarsened`)")
    shape = d["shape"].iloc[0] if "shape" in d else ""
    d = d[d["shape"] == shape] if shape else d  # one shape per map: the first the sweep ran
    ax.set_title(f"{d['variant'].iloc[0]} {shape}, GFLOP/s (thousands in the cells)", fontsize=10)
    grid = d.pivot_table(index="TS", columns="WPT", values="gflops", aggfunc="max")
    im = ax.imshow(grid.values, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(grid.columns)), [int(c) for c in grid.columns])
    ax.set_yticks(range(len(grid.index)), [int(i) for i in grid.index])
    ax.set_xlabel("WPT")
    ax.set_ylabel("TS")
    for (i, j), v in zip([(i, j) for i in range(grid.shape[0]) for j in range(grid.shape[1])], grid.values.ravel()):
        if not math.isnan(v):
            ax.text(j, i, f"{v / 1e3:.1f}", ha="center", va="center", color="w", fontsize=8)
    ax.figure.colorbar(im, ax=ax, label="GFLOP/s")
