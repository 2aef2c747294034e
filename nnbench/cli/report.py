"""`nnbench report`: plots of result files, and the self-contained HTML page."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.markup import escape

from nnbench import results
from nnbench.cli import app
from nnbench.cli.check import Tolerance
from nnbench.errors import NnbenchError


class Ceilings(click.ParamType):
    """TFLOPS,GBS: the FMA ceiling and copy bandwidth that `nnbench devices --measure` printed."""
    name = "TFLOPS,GBS"

    def convert(self, value, param, ctx):
        from nnbench.profiling.roofline import Roof
        try:
            tflops, gbs = (float(x) for x in str(value).split(","))
            if not (0 < tflops < 1e4 and 0 < gbs < 1e6):
                raise ValueError
        except ValueError:
            self.fail(f"{value}: give TFLOP/s,GB/s as two positive numbers, e.g. 51.2,3010", param, ctx)
        return Roof(tflops * 1e12, gbs * 1e9, "measured")


@app.cli.command()
@click.argument("csv_paths", metavar="RESULTS.csv...", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--plot", "kind", metavar="KIND", help="roofline, speedup, heatmap, train or conv (with --out).")
@click.option("--out", "out_path", type=click.Path(dir_okay=False),
              help="PNG to write, a new file (`name` writes name.png).")
@click.option("--html", "html_path", type=click.Path(dir_okay=False),
              help="Write one self-contained HTML page: environment, sortable tables, every figure, verdicts.")
@click.option("--baseline", type=click.Path(),
              help="With --html: add the gate's verdicts against it (a result file, or a folder of runs).")
@click.option("--tolerance", type=Tolerance(), default=None,
              help="The gate's tolerance (default as `nnbench check`: 5% against one run, 2% against several).")
@click.option("--ceilings", type=Ceilings(), default=None,
              help="Measured ceilings for the roofline, TFLOP/s,GB/s (from `nnbench devices --measure`).")
@click.option("--workload", default=None, help="Only the rows of this workload (gemm, train, conv, kernel, ...).")
@click.option("--suite", "old_workload", default=None, hidden=True)  # --workload's old name, still read
@click.option("--variant", "-v", "variants", multiple=True, help="Only these variants (repeatable).")
@click.option("--title", default="", help="Title over the plot.")
@app.json_option
@click.option("--force", is_flag=True, help="Let --out, --html or --json replace an existing file (never the default).")
def report(csv_paths, kind, out_path, html_path, baseline, tolerance, ceilings, workload, old_workload, variants, title,
           force) -> None:
    """Plot result CSVs as PNG, or put them all in one HTML page; --json keeps the rows it reports as
    one JSON results file (with their raw samples).

    \b
    Examples:
      nnbench report docs/data/figures/ladder_*.csv --plot roofline --out roofline.png
      nnbench report docs/data/figures/train_table_h100.csv --plot train --out train.png
      nnbench report results/ci.csv --baseline results/baselines/h100.csv --html report.html
      nnbench report results/a.csv results/b.csv --workload gemm --json gemm.jsonl
    """
    import pandas as pd

    from nnbench.report import plots
    if workload is not None and old_workload is not None:
        raise NnbenchError("--suite is the old name of --workload: give one of them")
    workload = workload if workload is not None else old_workload
    if (kind is None) != (out_path is None):
        raise NnbenchError("--plot and --out go together: --plot KIND --out FILE.png")
    if kind is None and html_path is None and app.JSON[0] is None:
        raise NnbenchError("say what to write: --plot KIND --out FILE.png, --html FILE.html or --json FILE.jsonl")
    if kind is not None and kind not in plots.KINDS:
        raise NnbenchError(f"--plot {kind}: choose from {', '.join(plots.KINDS)}")
    if tolerance is not None and not baseline:
        raise NnbenchError("--tolerance: goes with --baseline (the tolerance of the gate's verdicts in the page)")
    if baseline and not html_path:
        raise NnbenchError("--baseline: goes with --html (the gate itself is `nnbench check`)")
    if out_path:
        plots.png_path(Path(out_path))  # a wrong --out is refused before any file is read
    if html_path and Path(html_path).suffix.lower() not in (".html", ".htm"):
        raise NnbenchError(f"--html {html_path}: name a .html file")
    if app.JSON[0] is not None and not force:
        app.refuse_taken(app.JSON[0], "--force")
    frames = {p: _frame(p) for p in csv_paths}
    for p in [p for p, f in frames.items() if f.empty]:
        if len(frames) == 1:
            raise NnbenchError(f"{p}: has a header but no rows (a run stopped before its first); nothing to report")
        app.err.print(f"nnbench: {escape(p)}: has a header but no rows (a run stopped before its first); left out",
                      soft_wrap=True)
        del frames[p]
    df = pd.concat([f.assign(_file=p) for p, f in frames.items()], ignore_index=True)
    if workload is not None:
        present = sorted(set(plots.normalize(df)["workload"]))
        df = df[plots.normalize(df)["workload"] == workload]
        if df.empty:
            raise NnbenchError(f"--workload {workload}: no rows of it; the files hold {', '.join(present)}")
    if variants:
        present = sorted(set(plots.normalize(df)["variant"].astype(str)))
        df = df[plots.normalize(df)["variant"].isin(variants)]
        if df.empty:
            raise NnbenchError(f"--variant {' '.join(variants)}: no rows of it; the files hold {', '.join(present)}")
    if kind:
        written = plots.plot(df.drop(columns="_file"), kind, Path(out_path), title, force, ceilings)
        app.out.print(f"{kind} plot of {len(df)} rows: {escape(str(written))}")
    if html_path:
        _write_html(list(frames), df, Path(html_path), baseline, tolerance, ceilings, force)
    if app.JSON[0] is not None:
        _write_json(list(frames), workload, variants, Path(app.JSON[0]), force)


def _frame(path):
    """A result file's rows: a JSON results file through the gate's reader (which checks each record; pandas would
    read its lines as one column of text), a CSV through results.read_csv."""
    import pandas as pd

    from nnbench import rawresults
    if rawresults.is_json(path):
        return pd.DataFrame([r.fields for r in rawresults.load(path)]).reindex(columns=results.FIELDS)
    return results.read_csv(path)


def _write_json(sources, workload, variants, target: Path, force: bool = False) -> None:
    """The reported rows as a results file: each read again by the gate's reader (which keeps the raw
    samples), under the same --workload and --variant filters."""
    import pandas as pd

    from nnbench import rawresults, safeio
    from nnbench.report import plots
    recs = [r for p in sources for r in rawresults.load(p)]
    keep = plots.normalize(pd.DataFrame([r.fields for r in recs]))
    if workload is not None:
        keep = keep[keep["workload"] == workload]
    if variants:
        keep = keep[keep["variant"].isin(variants)]
    lines = [rawresults.line({**rawresults.typed(r.fields),
                              "samples_ms": None if r.samples_ms is None else list(r.samples_ms)})
             for r in (recs[i] for i in keep.index)]
    # whole or not at all (a full disk leaves no file cut short under the name asked for)
    target = safeio.write_whole(target, rawresults.header_line() + "".join(lines), force)
    app.out.print(f"JSON of {len(keep)} rows: {escape(str(target))}")


def _write_html(sources, df, target: Path, baseline, tolerance, ceilings, force) -> None:

    from nnbench import safeio, verdict
    from nnbench.report import html as htmlreport
    if tolerance is None:
        tolerance = verdict.default_tolerance(bool(baseline) and len(verdict.baseline_files(baseline)) > 1)
    page = htmlreport.render(sources, df, ["nnbench", *sys.argv[1:]], Path(baseline) if baseline else None,
                             tolerance, ceilings)
    target = safeio.write_whole(target, page, force)
    app.out.print(f"HTML report of {len(df)} rows: {escape(str(target))}")



