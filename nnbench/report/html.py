"""`nnbench report RESULTS... --html OUT.html`: one self-contained page to open and share.

It holds the device and environment of every file, each workload's rows as a sortable, filterable table
(DataTables 1.11.5 with jQuery 3.6.1, from Debian's libjs packages, vendored under nnbench/assets/ and
inlined, so the page needs no network), every figure that has something to draw (PNG, inlined), each
with the command that redraws it, and, given a baseline, the gate's verdicts beside each side's
timing distribution (min, quartiles and median: what a row keeps of its samples).
"""

from __future__ import annotations

import base64
import datetime as dt
import html
import math
import re
import shlex
from pathlib import Path

import pandas as pd

from nnbench import paths
from nnbench.report import plots
from nnbench.version import __version__

ASSETS = Path(__file__).parent.parent / "assets"  # nnbench/assets: package data (pyproject.toml)
# Shown for every workload, in this order; a workload's own columns follow.
COMMON = ["workload", "variant", "params", "precision", "shape", "unit", "median_ms", "iqr_ms", "gflops", "gbs",
          "pct_peak", "pct_vendor", "vendor", "speedup", "speedup_over", "rel_err", "status", "error"]
OWN = {"train": ["batch", "ranks", "iterations", "final_error", "test_accuracy", "samples_per_s", "tflops",
                 "vs_cublas_gemms", "weights_rel_err"],
       "conv": ["workspace_bytes"],
       "gemm": ["registers", "smem_bytes", "occupancy"]}
ENVIRONMENT = ["gpu", "backend", "cc", "sms", "driver", "cuda", "nvcc", "max_sm_clock_mhz", "fp32_peak_tflops",
               "dram_peak_gbs", "nnbench_version", "git_sha", "host"]
WHAT = {"roofline": "every verified case against the device's ceilings",
        "speedup": "speedup over the workload's baseline and % of the vendor row, per variant",
        "heatmap": "GFLOP/s over the two most-swept parameters, per variant and shape",
        "train": "time per iteration or step of each version across nets",
        "conv": "each convolution path against cuDNN, per layer"}


def _cell(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e4 else f"{v:,.0f}"
    return html.escape(str(v))


def _table(df: pd.DataFrame, cols: list[str], table_id: str) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = []
    for row in df[cols].itertuples(index=False):
        cells = []
        for c, v in zip(cols, row):
            # data-order: DataTables sorts a numeric column by the number, not by its text
            num = isinstance(v, int | float) and not (isinstance(v, float) and math.isnan(v))
            attr = f' data-order="{v!r}"' if num else ""
            cls = f' class="s-{html.escape(str(v))}"' if c == "status" else ""
            cells.append(f"<td{attr}{cls}>{_cell(v)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f'<div class="wide"><table id="{table_id}" class="nn display compact"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>")


def _environment(df: pd.DataFrame) -> str:
    """One column per file, one row per environment field (the rows repeat it; the first is shown)."""
    cols = {}
    for src, g in df.groupby("_file", sort=False):
        env = {c: html.escape(str(g[c].dropna().iloc[0])) if c in g and g[c].notna().any() else "" for c in ENVIRONMENT}
        stamps = g["timestamp"].dropna().astype(str).sort_values() if "timestamp" in g else pd.Series([], dtype=str)
        env["measured"] = html.escape(f"{stamps.iloc[0]} – {stamps.iloc[-1]}") if len(stamps) else ""
        cols[str(src)] = env
    head = "".join(f"<th>{html.escape(src)}</th>" for src in cols)
    body = "".join(f"<tr><th>{field}</th>" + "".join(f"<td>{env[field]}</td>" for env in cols.values()) + "</tr>"
                   for field in [*ENVIRONMENT, "measured"])
    return f'<table id="environment" class="env"><thead><tr><th></th>{head}</tr></thead><tbody>{body}</tbody></table>'


def _box_svg(sides: list[tuple[str, dict]], lo: float, hi: float) -> str:
    """Each side's min, q1, median and q3 on one shared linear ms axis, as a small inline SVG."""
    w, h, pad = 260, 18 * len(sides) + 14, 40
    span = (hi - lo) or 1.0

    def x(v: float) -> float:
        return pad + (v - lo) / span * (w - pad - 10)
    parts = [f'<svg width="{w}" height="{h}" role="img">']
    for i, (name, s) in enumerate(sides):
        y = 9 + 18 * i
        colour = "#0072B2" if name == "base" else "#D55E00"
        parts.append(f'<text x="0" y="{y + 4}" font-size="10">{html.escape(name)}</text>')
        if s.get("min") is not None and s.get("q1") is not None:
            parts.append(f'<line x1="{x(s["min"]):.1f}" x2="{x(s["q1"]):.1f}" y1="{y}" y2="{y}" stroke="{colour}"/>')
        if s.get("q1") is not None and s.get("q3") is not None:
            parts.append(f'<rect x="{x(s["q1"]):.1f}" y="{y - 5}" width="{max(x(s["q3"]) - x(s["q1"]), 1):.1f}" '
                         f'height="10" fill="none" stroke="{colour}"/>')
        parts.append(f'<line x1="{x(s["median"]):.1f}" x2="{x(s["median"]):.1f}" y1="{y - 6}" y2="{y + 6}" '
                     f'stroke="{colour}" stroke-width="2"/>')
    parts.append(f'<text x="{pad}" y="{h - 1}" font-size="9">{lo:.4g} ms</text>'
                 f'<text x="{w - 10}" y="{h - 1}" font-size="9" text-anchor="end">{hi:.4g} ms</text></svg>')
    return "".join(parts)


def _stats(row) -> dict | None:
    if row is None:
        return None
    try:
        out = {k: float(row[f"{k}_ms"]) if f"{k}_ms" in row and str(row[f"{k}_ms"]) not in ("", "nan") else None
               for k in ("min", "q1", "median", "q3")}
    except (TypeError, ValueError):
        return None
    return out if out["median"] is not None and not math.isnan(out["median"]) else None


def _verdicts(baseline: Path, current: list[Path], tolerance: float) -> str:
    from nnbench import verdict
    base = verdict.load_baseline(baseline)  # one run, or a folder of runs (each case's tolerance from its spread)
    cur = pd.concat([verdict.load(p) for p in current])
    cur = cur[~cur.index.duplicated(keep="last")]
    verdicts = verdict.compare(base, cur, tolerance)
    by_case = {}
    for side, df in (("base", base), ("current", cur)):
        for _, row in df.iterrows():
            by_case.setdefault((str(row["variant"]), str(row["params"]), str(row["shape"])), {})[side] = row
    counts = {name: sum(v.verdict == name for v in verdicts) for name in verdict.VERDICTS}
    rows = []
    for v in verdicts:
        sides = [(name, s) for name in ("base", "current")
                 if (s := _stats(by_case.get((v.variant, v.params, v.shape), {}).get(name))) is not None]
        values = [x for _, s in sides for x in s.values() if x is not None]
        box = _box_svg(sides, min(values), max(values)) if values else ""
        change = f"{v.change:+.1%}" if v.change is not None else ""
        rows.append(f'<tr><td class="v-{html.escape(v.verdict)}">{html.escape(v.verdict)}</td>'
                    f"<td>{html.escape(v.variant)}</td>"
                    f"<td>{html.escape(v.params)}</td><td>{html.escape(v.shape)}</td><td>{box}</td>"
                    f'<td data-order="{v.base_ms or 0}">{_cell(v.base_ms)}</td>'
                    f'<td data-order="{v.cur_ms or 0}">{_cell(v.cur_ms)}</td><td>{change}</td>'
                    f"<td>{html.escape(v.why)}</td></tr>")
    summary = ", ".join(f"{n} {c}" for n, c in counts.items() if c)
    gate = "fails" if verdict.gated(verdicts) else "passes"
    return (f"<p>Baseline <code>{html.escape(str(baseline))}</code>, tolerance {tolerance:.0%}: {summary}; the gate "
            f"<b>{gate}</b> (as <code>nnbench check</code>). The boxes: each side's q1–q3, its median (thick) and "
            "min (whisker), on one ms axis per case.</p>"
            '<div class="wide"><table id="verdicts" class="nn display compact"><thead><tr><th>verdict</th>'
            "<th>variant</th><th>params</th><th>shape</th><th>distribution</th><th>base ms</th><th>current ms</th>"
            f"<th>change</th><th>why</th></tr></thead><tbody>{''.join(rows)}</tbody></table></div>")


def render(sources: list[str], df: pd.DataFrame, command: list[str], baseline: Path | None = None,
           tolerance: float = 0.05, ceilings=None) -> str:
    """The page for the rows of `df` (each tagged with its `_file`), read from `sources`."""
    files = " ".join(shlex.quote(s) for s in sources)
    norm = plots.normalize(df)
    workloads = list(dict.fromkeys(norm["workload"]))
    figures = {}  # (workload, kind) -> PNG: one workload's rows per figure, so counters and baselines agree
    for workload in workloads:
        rows = df[norm["workload"] == workload].drop(columns="_file")
        figures.update({(workload, kind): png for kind, png in plots.drawable(rows, ceilings).items()})
    sections = [f"<h2>Device and environment</h2>{_environment(df)}"]
    if baseline is not None:
        sections.append(f"<h2>Gate verdicts</h2>{_verdicts(baseline, [Path(s) for s in sources], tolerance)}")
    figs, cmds = [], []
    for i, ((workload, kind), png) in enumerate(figures.items()):
        # A workload's name comes from a result file (data anyone can write): escaped wherever it is shown,
        # and in an id only as letters, digits, '_', '.' and '-' (numbered, so two names never share one).
        name = f"{workload}-{kind}" if len(workloads) > 1 else kind
        anchor = name if re.fullmatch(r"[\w.-]+", name, re.ASCII) else f"{i}-" + re.sub(r"[^\w.-]", "_", name,
                                                                                           flags=re.ASCII)
        only = f" --workload {shlex.quote(str(workload))}" if len(workloads) > 1 else ""
        redraw = f"nnbench report {files}{only} --plot {kind} --out {shlex.quote(name + '.png')}"
        data = base64.b64encode(png).decode()
        shown = html.escape(f"{workload} · {kind}")
        figs.append(f'<figure id="fig-{anchor}"><img alt="{html.escape(f"{workload} {kind} plot")}" '
                    f'src="data:image/png;base64,{data}"><figcaption><b>{shown}</b>: {html.escape(WHAT[kind])}. '
                    f'<a href="#cmd-{anchor}">The command that draws it</a>.</figcaption></figure>')
        cmds.append(f'<li id="cmd-{anchor}"><code>{html.escape(redraw)}</code></li>')
    sections.append("<h2>Figures</h2>" + ("".join(figs) or "<p>No figure has anything to draw for these rows.</p>"))
    for workload, g in norm.groupby("workload", sort=False):
        cols = [c for c in COMMON + OWN.get(str(workload), []) if c in g and g[c].notna().any()]
        sections.append(f"<h2>{html.escape(str(workload) or 'rows')}: {len(g)} rows</h2>"
                        + _table(g, cols, f"rows-{html.escape(str(workload) or 'rows')}"))
    made = " ".join(shlex.quote(a) for a in command)
    sections.append(f"<h2>Commands</h2><p>This page: <code>{html.escape(made)}</code></p><ul>{''.join(cmds)}</ul>")
    now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    from nnbench.results import git_sha
    return PAGE.format(
        title=html.escape(f"nnbench report: {', '.join(Path(s).name for s in sources)}"),
        css=(ASSETS / "jquery.dataTables.min.css").read_text(),
        jquery=(ASSETS / "jquery.min.js").read_text(), datatables=(ASSETS / "jquery.dataTables.min.js").read_text(),
        meta=html.escape(f"{len(df)} rows from {len(sources)} file(s) · made {now} by nnbench {__version__} "
                         f"({git_sha()}) in {paths.ROOT.name}"),
        body="".join(sections))


PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<style>{css}</style>
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 1.5em auto; max-width: 1400px; padding: 0 1em; color: #222; }}
h1 {{ font-size: 1.4em; }} h2 {{ font-size: 1.15em; margin-top: 2em; border-bottom: 1px solid #ccc; }}
figure {{ display: inline-block; margin: 0 1em 1em 0; vertical-align: top; }}
figure img {{ max-width: 100%; border: 1px solid #ddd; }}
table.nn td, table.nn th {{ font-size: 12px; white-space: nowrap; }}
table.nn td svg {{ display: block; }}
.wide {{ overflow-x: auto; }}
table.env {{ border-collapse: collapse; font-size: 12px; }}
table.env th, table.env td {{ text-align: left; padding: 2px 10px 2px 0; border-bottom: 1px solid #eee; }}
code {{ background: #f4f4f4; padding: 0 .2em; }}
.s-FAIL, .s-ERROR, .v-SLOWER, .v-FAILED, .v-INVALID, .v-MISSING,
.v-UNSTABLE, .v-AMBIGUOUS {{ color: #D55E00; font-weight: bold; }}
.s-PASS, .v-FASTER {{ color: #009E73; }}
.s-REFERENCE {{ color: #56B4E9; font-style: italic; }}
</style></head>
<body><h1>{title}</h1><p class="meta">{meta}</p>
{body}
<script>{jquery}</script>
<script>{datatables}</script>
<script>
$(function () {{
  $("table.nn").each(function () {{
    $(this).DataTable({{ paging: false, order: [], autoWidth: false, info: true }});
  }});
  document.body.dataset.ready = "1";
}});
</script>
</body></html>
"""
