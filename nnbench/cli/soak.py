"""`nnbench soak`: fresh seeds over tiny and odd problems on every path of a backend; each failure with the seed
and the command that reproduces it, exit 1 on any (nnbench/sweeps/soak.py)."""

from __future__ import annotations

import sys

import click
from rich.markup import escape

from nnbench import options
from nnbench.cli import app
from nnbench.errors import NnbenchError


@app.cli.command()
@click.option("--seeds", "count", type=click.IntRange(min=1), default=20, show_default=True,
              help="How many fresh seeds (from the operating system's entropy) each workload runs.")
@click.option("--seed", type=options.SEED, default=None,
              help="Run this one seed instead of fresh ones: how a reported failure is reproduced.")
@click.option("--workload", type=click.Choice(["gemm", "conv", "train", "all"]), default="all", show_default=True,
              help="Which workload's paths to soak.")
@app.json_option
@app.backend_option
def soak(count: int, seed: int | None, workload: str, backend: str) -> None:
    """Run N fresh seeds over tiny and odd problems (GEMMs 1x1x1 to 127x129x131; convolutions of 1x1 images, stride
    2 and padding; the smallest nets) on every path the backend has, each case verified as always and timed
    once. Every FAIL or ERROR row is printed with its seed and the exact command that runs it again; exit 1 on
    any. --json writes every row, with its seed, as a results file (docs/JSON.md)."""
    from nnbench import results
    from nnbench.sweeps import soak as soak_mod
    if app.JSON[0] is not None:
        app.refuse_taken(app.JSON[0])
    be = app.open_device(backend)
    names = list(soak_mod.WORKLOADS) if workload == "all" else [workload]
    given = click.get_current_context().get_parameter_source("count")
    if seed is not None and given == click.core.ParameterSource.COMMANDLINE:
        raise NnbenchError(f"--seeds {count} and --seed {seed} are exclusive: --seed runs that one seed")
    seeds = [seed] if seed is not None else soak_mod.fresh_seeds(count)
    plural = "s" if len(seeds) > 1 else ""
    app.out.print(f"soak · {', '.join(names)} · {len(seeds)} seed{plural} · backend {be.name}")
    sink = None
    if app.JSON[0] is not None:
        from nnbench.rawresults import JsonSink
        sink = JsonSink(app.JSON[0])
    try:
        out = soak_mod.soak(be, names, seeds, None if sink is None else lambda name, s, rec: sink.append(rec),
                            env=results.environment(be))
    finally:
        if sink is not None:
            sink.close()
    for f in out.failures:
        app.out.print(escape(f.line(be.name)), soft_wrap=True)
    app.out.print(f"{out.rows} rows, {len(out.failures)} failed")
    if sink is not None:
        app.out.print(f"JSON: {escape(str(sink.path))}")
    if out.failures:
        sys.exit(1)
