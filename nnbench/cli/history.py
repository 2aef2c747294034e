"""`nnbench history`: record result files into the history database, and show trends and change points."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from nnbench.cli import app
from nnbench.errors import NnbenchError


def db_option(f):
    return click.option("--db", "target", metavar="PATH|URL", default=None,
                        help="The history: a SQLite file, or postgresql://user@host/db for a fleet of runners "
                             "(default: $NNBENCH_HISTORY_DB, else results/history.sqlite).")(f)


class Fraction(click.ParamType):
    name = "P"

    def __init__(self, low: float, high: float, percent: bool = False) -> None:
        self.low, self.high, self.percent = low, high, percent

    def convert(self, value, param, ctx):
        if isinstance(value, float):
            return value
        text = str(value).strip()
        try:
            v = float(text[:-1]) / 100 if self.percent and text.endswith("%") else float(text)
        except ValueError:
            v = None
        if v is None or not self.low < v < self.high:
            self.fail(f"{value!r}: expected a number in ({self.low:g}, {self.high:g})" +
                      (", or a percentage such as 2%" if self.percent else ""), param, ctx)
        return v


def detection_options(f):
    from nnbench.history import changepoints
    f = click.option("--pvalue", "max_pvalue", type=Fraction(0, 1), default=changepoints.MAX_PVALUE,
                     show_default=True, help="A change point must pass a t-test between its segments at this level.")(f)
    return click.option("--min-change", type=Fraction(0, 10, percent=True),
                        default=f"{100 * changepoints.MIN_CHANGE:g}%", show_default=True,
                        help="A change point must move the mean by at least this much.")(f)


@app.cli.group()
def history() -> None:
    """Results across commits: record runs into a database, show trends and change points.

    \b
    Examples:
      nnbench history record results/ci-*.csv
      nnbench history show --case 'gemm|cublas*'
      nnbench history record results/ci.csv --db postgresql://nnbench@db.example/nnbench
      nnbench check --against-history results/ci.csv
    """


@history.command("record")
@click.argument("files", nargs=-1, required=True, metavar="RESULTS...", type=click.Path(dir_okay=False))
@db_option
@app.json_option
def record(files, target) -> None:
    """Store the runs in result files (CSV or --json files): commit, time, GPU, every case's statistics, raw
    samples and energy. A run already stored is not stored again. --json FILE lists each run: its id in the
    history, whether it was new, its commit, GPU, time, source and cases."""
    from nnbench import rawresults
    from nnbench.history import db, migrations, source, store
    if app.JSON[0]:
        app.refuse_taken(app.JSON[0])  # before anything is stored
    # Every file is read before anything is written: a bad file among several stores nothing.
    runs = [run for path in files for run in source.read(path)]
    lines = []
    with db.connect(target, create=True) as database:
        migrations.ready(database)
        for run in runs:
            done = store.record(database, run, store.commit_time(run.commit_sha))
            what = f"{len(run.cases)} cases of {run.commit_sha[:12]} on {run.gpu} from {run.source}"
            if done.new:
                app.out.print(f"recorded run {done.run_id}: {escape(what)}")
            else:
                app.out.print(f"already recorded (run {done.run_id}): {escape(what)}")
            lines.append(dict(kind="recorded-run", run_id=done.run_id, new=done.new, commit=run.commit_sha,
                              gpu=run.gpu, host=run.host, run_time=run.run_time, source=str(run.source),
                              cases=len(run.cases), database=database.where))
        app.out.print(f"history: {escape(database.where)}")
    if app.JSON[0]:
        app.out.print(f"JSON: {escape(str(rawresults.write_document(app.JSON[0], 'history-record', lines)))}")


@history.command("show")
@db_option
@click.option("--case", "cases", multiple=True, metavar="PATTERN",
              help="Only cases whose key (workload|variant|params|shape|hot) contains this, or matches it with * "
                   "and ?. Repeatable.")
@click.option("--gpu", default=None, help="Only this GPU's runs (by name, as in the records).")
@click.option("--png", "png_dir", type=click.Path(file_okay=False), default=None,
              help="Folder for one PNG per case (default results/history/; replaced on every call).")
@click.option("--no-png", is_flag=True, help="Print the table only.")
@detection_options
@app.json_option
def show(target, cases, gpu, png_dir, no_png, max_pvalue, min_change) -> None:
    """Trends per case: commits, the latest median, change points and the last stable segment; one PNG per case.
    --json FILE writes each case's series (commit, time, median per commit) with its change points."""
    from nnbench import paths, rawresults
    from nnbench.history import db, figures, migrations, store, trend
    if app.JSON[0]:
        app.refuse_taken(app.JSON[0])
    if png_dir and no_png:
        raise NnbenchError(f"--png {png_dir} and --no-png are exclusive")
    with db.connect(target, create=False) as database:
        migrations.ready(database)
        points = store.points(database, gpu=gpu, cases=cases)
        where = database.where
    if points.empty:
        what = f" matching {', '.join(cases)}" if cases else ""
        on = f" on {gpu}" if gpu else ""
        raise NnbenchError(f"{where}: no verified cases{what}{on} in the history")
    found = trend.trends(points, max_pvalue, min_change)
    folder = None if no_png else Path(png_dir) if png_dir else paths.RESULTS / "history"
    if folder is not None:  # a folder that cannot be one is refused before the table, so the error is the one line
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise NnbenchError(f"--png {folder}: cannot make the folder: {e.strerror or e}") from None
    app.out.print(_table(found, f"history {where} · {len(found)} cases · change points: p < {max_pvalue:g}, "
                                f"change >= {100 * min_change:g}%"))
    if app.JSON[0]:
        lines = [_trend_json(t, where, max_pvalue, min_change) for t in found]
        app.out.print(f"JSON: {escape(str(rawresults.write_document(app.JSON[0], 'history', lines)))}")
    if folder is not None:
        for t in found:
            figures.write(t, folder)
        app.out.print(f"figures: {len(found)} PNG in {escape(str(folder))}")


def _table(found, title: str) -> Table:
    from nnbench.report.tables import _num
    several = len({t.gpu for t in found}) > 1
    t = Table(title=title, title_justify="left", header_style="bold", pad_edge=False)
    names = ["case", "gpu", "commits", "first ms", "latest ms", "change", "change points", "stable since",
             "stable ms", "latest vs stable"]
    if not several:
        names.remove("gpu")
    for name in names:
        t.add_column(name, justify="left" if name in ("case", "gpu", "change points", "stable since") else "right")
    for tr in found:
        v = tr.values
        stable = float(_median(tr.stable["median_ms"]))
        cps = ", ".join(f"{tr.commits[c.index][:9]} {100 * c.change:+.1f}%" for c in tr.change_points) or "none"
        row = [escape(tr.label), tr.gpu, str(len(v)), _num(v[0], ".4f"), _num(v[-1], ".4f"),
               f"{100 * (v[-1] / v[0] - 1):+.1f}%", cps,
               f"{tr.commits[tr.stable_from][:9]} ({len(tr.stable)})", _num(stable, ".4f"),
               f"{100 * (v[-1] / stable - 1):+.1f}%"]
        if not several:
            row.pop(1)
        t.add_row(*row)
    return t


def _trend_json(tr, where: str, max_pvalue: float, min_change: float) -> dict:
    """One case's trend as `history show --json` writes it (docs/JSON.md): what the table prints, and the series."""
    pts = tr.points
    at = [None if x is None or (isinstance(x, float) and x != x) else str(x) for x in pts["at"]] \
        if "at" in pts.columns else [None] * len(pts)
    stable = float(_median(tr.stable["median_ms"]))
    v = tr.values
    return dict(
        kind="trend", case=tr.key, gpu=tr.gpu, workload=tr.workload, variant=tr.variant, params=tr.params,
        shape=tr.shape,
        database=where, detection={"max_pvalue": max_pvalue, "min_change": min_change},
        series=[{"commit": c, "at": a, "median_ms": float(m), "runs": int(r)}
                for c, a, m, r in zip(tr.commits, at, v, pts["runs"])],
        change_points=[{"commit": tr.commits[c.index], "index": c.index, "p_value": c.pvalue, "before_ms": c.before,
                        "after_ms": c.after, "change": c.change} for c in tr.change_points],
        stable_from=tr.commits[tr.stable_from], stable_commits=len(tr.stable), stable_ms=stable,
        latest_ms=float(v[-1]), latest_vs_stable=float(v[-1] / stable - 1))


def _median(s) -> float:
    import numpy as np
    return float(np.median(s.to_numpy(dtype=float)))
