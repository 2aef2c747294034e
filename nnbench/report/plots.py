"""Figures of result files (`nnbench report RESULTS... --plot KIND --out file.png`, and every figure of
`--html`), through matplotlib, an optional extra (`pip install -e '.[plot]'`):
  roofline  every verified case against the device's ceilings (theoretical from the rows, measured
            when given), the ridge point marked, each point labelled;
  speedup   per variant: speedup over the workload's baseline and efficiency (% of the vendor row), a
            bar per shape;
  heatmap   a parameter sweep: GFLOP/s over the two most-swept parameters, one panel per variant
            and shape (the best over the other parameters in each cell);
  train     time per iteration or step of each version across nets (log scale), and against ranks
            where the file holds several;
  conv      each convolution path against cuDNN, per layer.
A figure with nothing to draw is refused with one line (NnbenchError), never written empty.
"""

from __future__ import annotations

import io
import math
import re
from pathlib import Path

import pandas as pd

from nnbench import results
from nnbench.errors import NnbenchError
from nnbench.profiling.roofline import ROOF_NAMES, Roof
from nnbench.runtime.device import FFMA, TF32, TF32X3

KINDS = ("roofline", "speedup", "heatmap", "train", "conv")
SIZE_INCHES, DPI = (8.0, 5.0), 100  # 800 x 500 pixels for a one-panel figure
# Okabe & Ito's palette (distinct under every common colour-vision deficiency), with a marker per
# entry too, so a legend entry never depends on colour alone and no two entries look alike.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
MARKERS = "osD^vP*X<>hp"
LINES = ("-", "--", ":")  # past eight series the colours repeat: the line style then tells them apart
FILLS = ("full", "none", "left", "bottom", "right", "top")  # a roofline's shapes, up to six
NUMERIC = ("flops", "bytes", "median_ms", "gflops", "speedup", "pct_vendor", "pct_peak", "fp32_peak_tflops",
           "tf32_peak_tflops", "dram_peak_gbs", "ranks", "us_per_iteration", "us_per_step")


def style(i: int) -> dict:
    """The i-th series' colour, marker and line style: no two of the first 24 series alike."""
    return {"color": PALETTE[i % len(PALETTE)], "marker": MARKERS[i % len(MARKERS)],
            "linestyle": LINES[i // len(PALETTE) % len(LINES)]}


def _plt():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise NnbenchError("--plot needs matplotlib: pip install -e '.[plot]'") from None
    return plt


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


def normalize(df: pd.DataFrame) -> pd.DataFrame:
    """Rows of any schema nnbench has written, in today's: older training files name the variant
    `version` and time per iteration in µs; older GEMM files name % of cuBLAS `pct_cublas`; older files of every
    workload name it `suite` (results.upgrade_frame)."""
    df = results.upgrade_frame(df.copy())
    if "variant" not in df and "version" in df:
        df["variant"] = df["version"]
    if "pct_vendor" not in df and "pct_cublas" in df:
        df["pct_vendor"], df["vendor"] = df["pct_cublas"], "cublas"
    for col in NUMERIC:
        if col in df:
            df[col] = pd.to_numeric(df[col], errors="coerce")
    if "median_ms" not in df and "us_per_iteration" in df:
        df["median_ms"], df["unit"] = df["us_per_iteration"] / 1e3, "iteration"
    if "shape" not in df:
        df["shape"] = df["net"].astype(str) if "net" in df else ""
    df["shape"] = df["shape"].fillna("").astype(str)
    for col in ("workload", "unit"):
        if col not in df:
            df[col] = ""
    df["workload"] = df["workload"].fillna("")
    return df


def figure(df: pd.DataFrame, kind: str, title: str = "", ceilings: Roof | None = None):
    """The matplotlib figure of `kind` for the rows of `df`; NnbenchError if there is nothing to draw."""
    if kind not in KINDS:
        raise NnbenchError(f"--plot {kind}: choose from {', '.join(KINDS)}")
    d = normalize(df)
    # the reference's rows (no kernel ran: the CPU backend) are drawn under their own variant, `reference`
    d = d[d["status"].isin(sorted(results.TIMED))] if "status" in d else d
    workloads = sorted(set(d["workload"]) - {""})
    if kind in ("roofline", "speedup") and len(workloads) > 1:  # one workload's counters and baseline per figure
        raise NnbenchError(f"--plot {kind}: the rows are of several workloads ({', '.join(workloads)}); pick one with "
                           "--workload")
    plt = _plt()
    draw = {"roofline": _roofline, "speedup": _speedup, "heatmap": _heatmap, "train": _train, "conv": _conv}[kind]
    # constrained layout: room for legends outside the axes and a colorbar shared by several panels
    fig = plt.figure(figsize=SIZE_INCHES, dpi=DPI, layout="constrained")
    try:
        draw(fig, d, ceilings) if kind == "roofline" else draw(fig, d)
        if title:
            fig.suptitle(title)
    except BaseException:
        plt.close(fig)
        raise
    return fig


def png_bytes(fig) -> bytes:
    image = io.BytesIO()
    try:
        fig.savefig(image, format="png", dpi=DPI)
    finally:
        _plt().close(fig)
    return image.getvalue()


def plot(df: pd.DataFrame, kind: str, out: Path, title: str = "", force: bool = False,
         ceilings: Roof | None = None) -> Path:
    """Draw `kind` from `df` and write it, as a new file (or, with force, a replaced one), to
    png_path(out); return the path written."""
    from nnbench import safeio
    if kind not in KINDS:
        raise NnbenchError(f"--plot {kind}: choose from {', '.join(KINDS)}")
    target = png_path(out)
    data = png_bytes(figure(df, kind, title, ceilings))
    return safeio.write_whole(target, data, force)


def _plain(ax, axis: str = "both") -> None:
    """Log-axis ticks as plain numbers (0.1, 1, 10, 100), not 10^1 or 6x10^1."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    fmt = FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}")
    for name in ("x", "y") if axis == "both" else (axis,):
        a = getattr(ax, f"{name}axis")
        lo, hi = sorted(getattr(ax, f"get_{name}lim")())
        # 1-3 ticks over several decades, 1-2-5 over one or two, finer within one: never one label, never crowded
        span = hi / lo if lo > 0 else 1e9
        subs = (1.0, 3.0) if span > 100 else (1.0, 2.0, 5.0) if span > 30 else (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0)
        a.set_major_locator(LogLocator(base=10, subs=subs))
        a.set_major_formatter(fmt)
        a.set_minor_formatter(NullFormatter())


def _series(values) -> dict:
    """Each distinct value, in first-seen order, with its colour and marker."""
    return {v: style(i) for i, v in enumerate(dict.fromkeys(values))}


# -- roofline ---------------------------------------------------------------------------------------

def _roofline(fig, d: pd.DataFrame, measured: Roof | None) -> None:
    need = ["flops", "bytes", "median_ms"]
    d = d.dropna(subset=need) if set(need) <= set(d) else pd.DataFrame()
    d = d[(d.get("flops", 0) > 0) & (d.get("bytes", 0) > 0) & (d.get("median_ms", 0) > 0)] if not d.empty else d
    if d.empty:
        raise NnbenchError("--plot roofline: no verified row has flops, bytes and median_ms; nothing to plot")
    ax = fig.add_subplot()
    d = d.assign(ai=d["flops"] / d["bytes"], tflops=d["flops"] / (d["median_ms"] * 1e-3) / 1e12)
    first = d.iloc[0]
    roofs = []  # (label, Roof, line style)
    bw = first.get("dram_peak_gbs")
    precisions = set(d["precision"].dropna()) if "precision" in d else set()
    for precision, ls in ((FFMA, "-"), (TF32, "-."), (TF32X3, ":")):
        if precision == TF32X3 and precision not in precisions:
            continue  # drawn only for the rows it is the roof of
        peak = _peak_tflops(first, precision)
        if bw and peak and not (math.isnan(bw) or math.isnan(peak)):
            roofs.append((f"{ROOF_NAMES[precision]} peak {peak:.1f} TFLOP/s, DRAM {bw / 1e3:.2f} TB/s (theoretical)",
                          Roof(peak * 1e12, bw * 1e9, "theoretical", ROOF_NAMES[precision]), ls))
    if measured is not None:
        roofs.append((f"measured: FMA {measured.flops / 1e12:.1f} TFLOP/s, copy {measured.bandwidth / 1e12:.2f} TB/s",
                      measured, "--"))
    ridges = [r.ridge for _, r, _ in roofs]
    lo = min([d["ai"].min(), *ridges]) / 4
    hi = max([d["ai"].max(), *ridges]) * 8  # room for the labels right of the last points
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    for label, roof, ls in roofs:
        ax.plot(xs, [roof.attainable(x) / 1e12 for x in xs], ls, color="#444444", lw=1.2, label=label)
        ax.plot([roof.ridge], [roof.flops / 1e12], "|", color="#444444", ms=14, mew=1.5)
        ax.annotate(f"ridge {roof.ridge:.0f} FLOP/B", (roof.ridge, roof.flops / 1e12), textcoords="offset points",
                    xytext=(4, 6), fontsize=7, color="#444444")
    series = _series(d["variant"])
    shapes = list(dict.fromkeys(d["shape"]))
    fills = {shape: FILLS[i] for i, shape in enumerate(shapes)} if len(shapes) <= len(FILLS) else {}
    for (name, shape), g in d.groupby(["variant", "shape"], sort=False):
        ax.plot(g["ai"], g["tflops"], ms=6, fillstyle=fills.get(shape, "full"), **{**series[name], "linestyle": "none"})
    for name, st in series.items():
        ax.plot([], [], ms=6, label=str(name), **{**st, "linestyle": "none"})
    above = d[above_roof(d)]
    if not above.empty:  # no point may sit above its own precision's roof: a wrong roof or a timing error
        ax.plot(above["ai"], above["tflops"], "o", ms=14, fillstyle="none", color="#d62728", mew=1.5,
                label=f"SUSPECT: above its precision's roof ({len(above)}): a wrong roof or a timing error")
    if len(fills) > 1:  # shapes told apart by fill, each with a legend entry of its own (in black)
        for shape, fill in fills.items():
            ax.plot([], [], "o", color="black", ms=6, fillstyle=fill, label=f"shape {shape}")
    top = max([d["tflops"].max(), *(r.flops / 1e12 for _, r, _ in roofs)])
    bottom = d["tflops"].min()
    ax.set_ylim(bottom / 2, top * 2)
    _label_points(ax, d, series, math.log10(top * 2) - math.log10(bottom / 2), with_shape=len(shapes) > 1 and not fills)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    _plain(ax)
    ax.set_xlabel("arithmetic intensity (FLOP/byte, of the fewest bytes moved)")
    device = first.get("gpu") if isinstance(first.get("gpu"), str) else "?"
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"roofline · {device}" + ("" if roofs else " · no roof: the CPU backend records no peak"),
                 fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.grid(True, which="major", alpha=0.3)


def _peak_tflops(row, precision) -> float | None:
    """A row's compute ceiling for `precision` from its environment columns, as the tables' %peak takes it
    (runtime.device.DeviceInfo.peak_flops): FP32 FFMA, TF32, 3xTF32 = TF32 / 3; None for any other."""
    fp32, tf32 = row.get("fp32_peak_tflops"), row.get("tf32_peak_tflops")
    return {FFMA: fp32, TF32: tf32, TF32X3: None if tf32 is None else tf32 / 3}.get(precision)


def above_roof(d: pd.DataFrame) -> pd.Series:
    """Which rows (with `ai` and `tflops`) lie above their precision's roof at their intensity."""
    def one(row) -> bool:
        peak, bw = _peak_tflops(row, row.get("precision")), row.get("dram_peak_gbs")
        if peak is None or bw is None or math.isnan(peak) or math.isnan(bw):
            return False
        return row["tflops"] > min(peak, row["ai"] * bw / 1e3)
    return d.apply(one, axis=1).astype(bool) if not d.empty else pd.Series([], dtype=bool)


def _label_points(ax, d: pd.DataFrame, series: dict, decades: float, with_shape: bool) -> None:
    """Each point's variant, in a column to the right of its cluster (points within a factor 1.6 of
    intensity), spread so that no two labels overlap, with a thin leader line to the point. A cluster
    of more than 12 points labels each variant's best point only (colour and marker tell the rest)."""
    gap = decades * 0.045  # in decades of the y axis: about one line of 7-pt text on a 5-inch figure
    clusters: list[list[float]] = []
    for ai in sorted(set(d["ai"])):
        if clusters and ai < clusters[-1][-1] * 1.6:
            clusters[-1].append(ai)
        else:
            clusters.append([ai])
    for members in clusters:
        g = d[d["ai"].isin(members)]
        if len(g) > 12:
            g = g.loc[g.groupby("variant", sort=False)["tflops"].idxmax()]
        g = g.sort_values("tflops")
        ys = [math.log10(v) for v in g["tflops"]]
        placed: list[float] = []
        for y in ys:
            placed.append(max(y, placed[-1] + gap) if placed else y)
        shift = max(0.0, (placed[-1] - ys[-1]) / 2)  # centre the column on the points
        x = max(members) * 1.6
        for (_, row), y in zip(g.iterrows(), placed):
            text = f"{row['variant']} {row['shape']}" if with_shape else str(row["variant"])
            ax.annotate(text, (row["ai"], row["tflops"]), xytext=(x, 10 ** (y - shift)), textcoords="data",
                        fontsize=6.5, va="center", color=series[row["variant"]]["color"],
                        arrowprops={"arrowstyle": "-", "lw": 0.4, "color": "#999999"})


# -- speedup and efficiency -------------------------------------------------------------------------

def _grouped_bars(ax, d: pd.DataFrame, col: str, log: bool, fmt: str, shapes: dict) -> None:
    """One group per variant, one bar per shape in it, each bar labelled with its value."""
    variants = list(dict.fromkeys(d["variant"]))
    shapes = {s: st for s, st in shapes.items() if s in set(d["shape"])}
    width = 0.8 / len(shapes)
    for j, (shape, st) in enumerate(shapes.items()):
        g = d[d["shape"] == shape].groupby("variant", sort=False)[col].max()
        xs = [variants.index(v) + (j - (len(shapes) - 1) / 2) * width for v in g.index]
        ax.bar(xs, g.values, width * 0.95, color=st["color"], label=shape or "—")
        if len(variants) * len(shapes) <= 16:  # past that the values would overprint; the table has them
            for x, v in zip(xs, g.values):
                ax.text(x, v, fmt.format(v), ha="center", va="bottom", fontsize=6.5)
    ax.set_xticks(range(len(variants)), variants, rotation=30, ha="right", fontsize=8)
    if log:
        ax.set_yscale("log")
        _plain(ax, "y")
    ax.grid(True, axis="y", alpha=0.3)


def _positive(d: pd.DataFrame, col: str) -> pd.DataFrame:
    if col not in d:
        return d.iloc[0:0]
    return d[d[col].notna() & d[col].gt(0) & d[col].lt(math.inf)]


def _spread(values: pd.Series) -> bool:
    return values.max() / values.min() > 30


def _speedup(fig, d: pd.DataFrame) -> None:
    sp, eff = _positive(d, "speedup"), _positive(d, "pct_vendor")
    if sp.empty and "speedup_vs_sequential" in d:  # an older training file
        d = d.assign(speedup=pd.to_numeric(d["speedup_vs_sequential"], errors="coerce"), speedup_over="sequential")
        sp = _positive(d, "speedup")
    if sp.empty and eff.empty:
        raise NnbenchError("--plot speedup: no verified row has a speedup or a % of the vendor row; nothing to plot")
    panels = [p for p in (("speedup", sp), ("pct_vendor", eff)) if not p[1].empty]
    shapes = _series(pd.concat([sp["shape"], eff["shape"]]))
    if len(shapes) > 1:  # one legend for both panels, above them
        from matplotlib.patches import Patch
        fig.legend(handles=[Patch(color=st["color"], label=s) for s, st in shapes.items()],
                   loc="outside upper center", ncols=min(len(shapes), 4), fontsize=7, frameon=False, title="shape",
                   title_fontsize=7)
    for i, (col, rows) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), i + 1)
        _grouped_bars(ax, rows, col, _spread(rows[col]), "{:.1f}×" if col == "speedup" else "{:.0f}%", shapes)
        if col == "speedup":
            over = rows["speedup_over"].dropna().astype(str) if "speedup_over" in rows else pd.Series([], dtype=str)
            ax.set_ylabel(f"speedup over {over.iloc[0] if len(over) else 'the baseline'} (×)")
            ax.axhline(1.0, color="#444444", lw=0.8)
        else:
            vendor = rows["vendor"].dropna().astype(str) if "vendor" in rows else pd.Series([], dtype=str)
            ax.set_ylabel(f"efficiency: % of {vendor.iloc[0] if len(vendor) else 'the vendor'}")
            ax.axhline(100.0, color="#444444", lw=0.8, ls="--")


# -- parameter heatmaps -----------------------------------------------------------------------------

_PARAM = re.compile(r"([A-Za-z_]+)=(\d+)")


def _param_table(params: pd.Series) -> pd.DataFrame:
    return pd.DataFrame([{k: int(v) for k, v in _PARAM.findall(str(p))} for p in params], index=params.index)


def _heat_panels(d: pd.DataFrame) -> list[tuple[str, str, str, str, pd.DataFrame]]:
    """(variant, shape, x param, y param, best GFLOP/s grid) for every variant and shape whose sweep
    varies at least two parameters."""
    out = []
    if "params" not in d or "gflops" not in d:
        return out
    for (variant, shape), g in d.dropna(subset=["gflops"]).groupby(["variant", "shape"], sort=False):
        p = _param_table(g["params"])
        swept = sorted((c for c in p if p[c].nunique() > 1), key=lambda c: (-p[c].nunique(), list(p).index(c)))
        if len(swept) < 2:
            continue
        y, x = swept[:2]
        grid = g.assign(_x=p[x], _y=p[y]).pivot_table(index="_y", columns="_x", values="gflops", aggfunc="max")
        out.append((str(variant), str(shape), x, y, grid))
    return out


def _heatmap(fig, d: pd.DataFrame) -> None:
    panels = _heat_panels(d)
    if not panels:
        raise NnbenchError("--plot heatmap: no variant sweeps two parameters (params with two or more values "
                           "each); nothing to plot")
    shapes = list(dict.fromkeys(p[1] for p in panels))
    variants = list(dict.fromkeys(p[0] for p in panels))
    cols, rows = len(shapes), len(variants)
    fig.set_size_inches(max(SIZE_INCHES[0], 4.2 * cols), max(SIZE_INCHES[1], 3.4 * rows))
    vmax = max(float(p[4].max().max()) for p in panels)
    for variant, shape, x, y, grid in panels:
        ax = fig.add_subplot(rows, cols, variants.index(variant) * cols + shapes.index(shape) + 1)
        im = ax.imshow(grid.values / 1e3, cmap="viridis", aspect="auto", vmin=0, vmax=vmax / 1e3)
        ax.set_xticks(range(len(grid.columns)), [int(c) for c in grid.columns], fontsize=7)
        ax.set_yticks(range(len(grid.index)), [int(i) for i in grid.index], fontsize=7)
        ax.set_xlabel(x, fontsize=8)
        ax.set_ylabel(y, fontsize=8)
        ax.set_title(f"{variant} · {shape}", fontsize=9)
        for i in range(grid.shape[0]):
            for j in range(grid.shape[1]):
                v = grid.values[i, j]
                if not math.isnan(v):
                    ax.text(j, i, f"{v / 1e3:.1f}", ha="center", va="center", fontsize=6.5,
                            color="white" if v < 0.6 * vmax else "black")
    fig.colorbar(im, ax=fig.axes, label="TFLOP/s (best over the other parameters)", shrink=0.8)


# -- training ---------------------------------------------------------------------------------------

def _net_order(shape: str) -> tuple:
    m = re.search(r"(\d+)", shape)
    return (int(m.group(1)) if m else 1 << 30, shape)


def _train(fig, d: pd.DataFrame) -> None:
    d = d[(d["workload"] == "train") & d["median_ms"].gt(0)] if "median_ms" in d else d.iloc[0:0]
    if d.empty:
        raise NnbenchError("--plot train: no verified training row with a time (a `nnbench train` result); "
                           "nothing to plot")
    ranks = d["ranks"].fillna(1) if "ranks" in d else pd.Series(1, index=d.index)
    scaling = ranks.nunique() > 1
    unit = d["unit"].fillna("").replace("", "iteration")
    panels = [(u, d[unit == u]) for u in dict.fromkeys(unit)]
    n = len(panels) + scaling
    series = _series(d["variant"])
    for i, (unit, rows) in enumerate(panels):
        ax = fig.add_subplot(1, n, i + 1)
        shapes = sorted(dict.fromkeys(rows["shape"]), key=_net_order)
        for name, g in rows.groupby("variant", sort=False):
            g = g.groupby("shape")["median_ms"].min()
            xs = [shapes.index(s) for s in g.index]
            order = sorted(range(len(xs)), key=xs.__getitem__)
            ax.plot([xs[k] for k in order], [g.values[k] * 1e3 for k in order], lw=1, ms=5, label=str(name),
                    **series[name])
        ax.set_xticks(range(len(shapes)), shapes, rotation=30 if len(shapes) > 4 else 0, ha="right", fontsize=8)
        ax.set_yscale("log")
        _plain(ax, "y")
        ax.set_ylabel(f"µs per {unit} (median)")
        ax.grid(True, which="major", alpha=0.3)
    if scaling:
        ax = fig.add_subplot(1, n, n)
        for name, g in d.assign(_r=ranks).groupby("variant", sort=False):
            g = g.groupby("_r")["median_ms"].min()
            ax.plot(g.index, g.values * 1e3, lw=1, ms=5, label=str(name), **series[name])
        ax.set_xlabel("ranks (GPUs)")
        ax.set_ylabel("µs per step")
        ax.set_xscale("log", base=2)
        ax.grid(True, alpha=0.3)
    fig.axes[-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, title="version",
                        title_fontsize=7)


# -- convolution ------------------------------------------------------------------------------------

def _conv(fig, d: pd.DataFrame) -> None:
    d = d[d["workload"] == "conv"]
    vs = _positive(d, "pct_vendor")
    # Against cuDNN where the run had it (a GPU with PyTorch); else each path's own GFLOP/s per layer.
    col, d = ("pct_vendor", vs) if not vs.empty else ("gflops", _positive(d, "gflops"))
    if d.empty:
        raise NnbenchError("--plot conv: no verified convolution row with a time (a `nnbench conv` result); "
                           "nothing to plot")
    ax = fig.add_subplot()
    layers = list(dict.fromkeys(d["shape"]))
    paths = _series(d["variant"])
    width = 0.8 / len(paths)
    for j, (path, st) in enumerate(paths.items()):
        g = d[d["variant"] == path].groupby("shape", sort=False)[col].max()
        xs = [layers.index(s) + (j - (len(paths) - 1) / 2) * width for s in g.index]
        ax.bar(xs, g.values, width * 0.95, color=st["color"], hatch="//" if st["linestyle"] != "-" else None,
               label=path)
    if col == "pct_vendor":
        ax.axhline(100.0, color="#444444", lw=1, ls="--", label="cuDNN (FP32) = 100%")
    ax.set_xticks(range(len(layers)), layers, rotation=20, ha="right", fontsize=7)
    ax.set_yscale("log")
    _plain(ax, "y")
    ax.set_ylabel("% of cuDNN's speed (log)" if col == "pct_vendor" else "GFLOP/s (log; no cuDNN row in these results)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, title="path",
              title_fontsize=7)


def drawable(df: pd.DataFrame, ceilings: Roof | None = None) -> dict[str, bytes]:
    """Every kind that has something to draw for these rows, as PNG bytes (the HTML report's figures)."""
    out = {}
    for kind in KINDS:
        try:
            out[kind] = png_bytes(figure(df, kind, ceilings=ceilings))
        except NnbenchError:
            continue
    return out
