"""`nnbench soak`: fresh seeds over tiny and odd problems on every path of a backend; each failure with the seed
and the command that reproduces it, exit 1 on any (nnbench/sweeps/soak.py)."""

from __future__ import annotations

import os
import sys
import time

import click
from rich.markup import escape

from nnbench import options
from nnbench.cli import app
from nnbench.errors import NnbenchError

# A million seeds are ten days of two H200s (1.16 seeds/s); the seeds are drawn up front, and 10**9 of them
# took all of a host's memory before the first ran.
MAX_SEEDS = 1_000_000


@app.cli.command()
@click.option("--seeds", "count", type=click.IntRange(min=1, max=MAX_SEEDS), default=20, show_default=True,
              help="How many fresh seeds (from the operating system's entropy) each workload runs.")
@click.option("--seed", type=options.SEED, default=None,
              help="Run this one seed instead of fresh ones: how a reported failure is reproduced.")
@click.option("--workload", type=click.Choice(["gemm", "conv", "train", "all"]), default="all", show_default=True,
              help="Which workload's paths to soak.")
@click.option("--gpus", "gpus_opt", metavar="all|N",
              help="Split the seeds into contiguous slices over worker processes on the GPUs of this host (the "
                   "first N from --device, or all), --workers-per-gpu on each, each pinned to its GPU; one --json "
                   "file. With --backend cpu: N CPU workers.")
@click.option("--workers-per-gpu", "per_gpu_opt", metavar="auto|N", default="auto", show_default=True,
              help="With --gpus: worker processes per GPU, each with its own CUDA context and its own slice of the "
                   "seeds (a seed is mostly host work: Python, float64 references, audits). auto: the host's cores "
                   "over the GPUs, at most 16 per GPU; 1 with --backend cpu, where --gpus N counts the workers.")
@click.option("--time-limit", "time_limit", type=options.POSITIVE, default=None,
              metavar="SECONDS",
              help="Start no seed after this many seconds (a seed under way finishes); say how many seeds ran.")
@app.json_option
@app.backend_option
def soak(count: int, seed: int | None, workload: str, gpus_opt: str | None, per_gpu_opt: str,
         time_limit: float | None, backend: str) -> None:
    """Run N fresh seeds over tiny and odd problems (GEMMs 1x1x1 to 127x129x131; convolutions of 1x1 images, stride
    2 and padding; LeNet-5's step on 1 and 7 images; the smallest nets) on every path the backend has, each case
    verified as always and timed once. Every FAIL or ERROR row is printed with its seed and the exact command that
    runs it again; exit 1 on any. --json writes every row, with its seed, as a results file (docs/JSON.md).

    \b
    Examples:
      nnbench soak --seeds 1000 --gpus all --time-limit 500 --json soak.jsonl
      nnbench soak --seeds 1000 --gpus all --workers-per-gpu 12   # 12 processes on each GPU
      nnbench soak --workload gemm --seed 1234   # one reported seed again (its line names the backend too)
    """
    from nnbench import results
    from nnbench.sweeps import soak as soak_mod
    if app.JSON[0] is not None:
        app.refuse_taken(app.JSON[0])
    names = list(soak_mod.WORKLOADS) if workload == "all" else [workload]
    given = click.get_current_context().get_parameter_source("count")
    if seed is not None and given == click.core.ParameterSource.COMMANDLINE:
        raise NnbenchError(f"--seeds {count} and --seed {seed} are exclusive: --seed runs that one seed")
    per_gpu_text(per_gpu_opt)
    given_per_gpu = click.get_current_context().get_parameter_source("per_gpu_opt")
    if given_per_gpu == click.core.ParameterSource.COMMANDLINE and gpus_opt is None:
        raise NnbenchError(f"--workers-per-gpu {per_gpu_opt}: needs --gpus all|N (without it the soak runs in this "
                           "one process)")
    gpus = None
    if gpus_opt is not None:  # `--gpus ""` (a variable never set) is refused by _gpus, not read as no --gpus
        from nnbench.cli.sweep import _gpus
        from nnbench.sweeps import soakpool
        backend = app.worker_backend(backend)  # this process never initialises CUDA: its workers own the GPUs
        gpus = _gpus(gpus_opt, backend)
        per_gpu = soakpool.auto_workers_per_gpu(len(gpus), backend) if per_gpu_opt == "auto" else int(per_gpu_opt)
        cores = os.cpu_count() or 1
        if backend == "cpu" and len(gpus) * per_gpu > cores:
            raise NnbenchError(f"--workers-per-gpu {per_gpu_opt}: with --backend cpu --gpus {gpus_opt}, at most "
                               f"{max(1, cores // len(gpus))} (this machine's {cores} cores over {len(gpus)})")
        be = None
    else:
        be = app.open_device(backend)
    seeds = [seed] if seed is not None else soak_mod.fresh_seeds(count)
    deadline = time.time() + time_limit if time_limit is not None else None
    plural = "s" if len(seeds) > 1 else ""
    head = f"soak · {', '.join(names)} · {len(seeds)} seed{plural}"
    sink = None
    if app.JSON[0] is not None:
        from nnbench.rawresults import JsonSink
        sink = JsonSink(app.JSON[0])
    on_row = None if sink is None else lambda name, s, rec: sink.append(rec)
    try:
        if gpus is None:
            app.out.print(f"{head} · backend {be.name}")
            out = soak_mod.soak(be, names, seeds, on_row, env=results.environment(be), deadline=deadline)
            name = be.name
        else:
            workers = len(soakpool.split(seeds, len(gpus) * per_gpu))
            said: list[str] = []

            def hello(backend_name: str) -> None:
                said.append(backend_name)
                if backend_name == "cpu":
                    spread = f"{workers} CPU worker{'s' if workers > 1 else ''}"
                else:
                    on = min(len(gpus), workers)
                    spread = f"{on} GPU{'s' if on > 1 else ''}, {workers} worker{'s' if workers > 1 else ''}"
                app.out.print(f"{head} · backend {backend_name} · {spread}")
            out = soakpool.run(backend, gpus, names, seeds, deadline, on_row, hello, per_gpu=per_gpu)
            name = said[0] if said else backend
    finally:
        if sink is not None:
            sink.close()
    for f in out.failures:
        app.out.print(escape(f.line(name)), soft_wrap=True)
    app.out.print(summary(out, len(seeds), time_limit))
    if sink is not None:
        app.out.print(f"JSON: {escape(str(sink.path))}")
    if out.failures:
        sys.exit(1)


def per_gpu_text(text: str) -> None:
    if text != "auto" and not (text.isascii() and text.isdigit() and int(text) >= 1):  # not '²', which isdigit
        raise NnbenchError(f"--workers-per-gpu {text}: expected auto or a number of workers >= 1")


def summary(out, asked: int, time_limit: float | None) -> str:
    """The closing line: rows, failures, and how many of the seeds ran, at what rate."""
    ran = len(out.seeds)
    rate = f"{ran / out.seconds:.3g} seeds/s" if out.seconds > 0 else "no time measured"
    line = f"{out.rows} rows, {len(out.failures)} failed · {ran} of {asked} seed{'s' if asked > 1 else ''} ran in " \
           f"{out.seconds:.1f} s ({rate})"
    if out.stopped == "time":
        line += f" · stopped at the --time-limit of {time_limit:g} s: {asked - ran} not run"
    elif out.stopped == "fault":
        line += f" · stopped at a kernel fault (the context is poisoned): {asked - ran} not run"
    return line
