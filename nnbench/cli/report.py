"""`nnbench report`: plots of result files."""

from __future__ import annotations

from pathlib import Path

import click

from nnbench.cli import app
from nnbench.errors import NnbenchError


@app.cli.command()
@click.argument("csv_paths", metavar="RESULTS.csv...", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--plot", "kind", required=True, metavar="KIND", help="roofline, speedup or heatmap.")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False), help="PNG to write.")
@click.option("--title", default="", help="Title over the plot.")
def report(csv_paths, kind, out_path, title) -> None:
    """Plot result CSVs as PNG: a roofline of every case, speedup bars per version, or a TS x WPT heatmap.

    \b
    Examples:
      nnbench report docs/data/ladder_4096.csv docs/data/ladder_odd.csv --plot roofline --out roofline.png
      nnbench report docs/data/train_net1_h100.csv --plot speedup --out speedup.png
    """
    import pandas as pd

    from nnbench.profiling import plots
    for p in csv_paths:
        if not Path(p).exists():
            raise NnbenchError(f"{p}: no such file")
    if kind not in plots.KINDS:
        raise NnbenchError(f"--plot {kind}: choose from {', '.join(plots.KINDS)}")
    df = pd.concat([pd.read_csv(p) for p in csv_paths], ignore_index=True)
    plots.plot(df, kind, Path(out_path), title)
    app.out.print(f"{kind} plot of {len(df)} rows: {out_path}")

