"""`nnbench report`: plots of result files."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape

from nnbench import results
from nnbench.cli import app
from nnbench.cli.app import force_option
from nnbench.errors import NnbenchError


@app.cli.command()
@click.argument("csv_paths", metavar="RESULTS.csv...", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--plot", "kind", required=True, metavar="KIND", help="roofline, speedup or heatmap.")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False),
              help="PNG to write, a new file (`name` writes name.png).")
@click.option("--title", default="", help="Title over the plot.")
@force_option
def report(csv_paths, kind, out_path, title, force) -> None:
    """Plot result CSVs as PNG: a roofline of every case, speedup bars per version, or a TS x WPT heatmap.

    \b
    Examples:
      nnbench report docs/data/ladder_4096.csv docs/data/ladder_odd.csv --plot roofline --out roofline.png
      nnbench report docs/data/train_net1_h100.csv --plot speedup --out speedup.png
    """
    import pandas as pd

    from nnbench.profiling import plots
    if kind not in plots.KINDS:
        raise NnbenchError(f"--plot {kind}: choose from {', '.join(plots.KINDS)}")
    plots.png_path(Path(out_path))  # a wrong --out is refused before any file is read
    df = pd.concat([_read(p) for p in csv_paths], ignore_index=True)
    written = plots.plot(df, kind, Path(out_path), title, force)
    app.out.print(f"{kind} plot of {len(df)} rows: {escape(str(written))}")


def _read(path: str):
    df = results.read_csv(path)
    if df.empty:
        raise NnbenchError(f"{path}: has a header but no rows; nothing to plot")
    return df
