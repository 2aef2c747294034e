"""`nnbench train`: the seed's MLP per sample or in mini-batches, data-parallel over ranks."""

from __future__ import annotations

import math
import sys
import time
from dataclasses import replace

import click
from rich.console import Console

from nnbench import harness, memory, options, results, workloads
from nnbench.cli import app, nogpu
from nnbench.cli.app import (
    backend_option,
    device_line,
    energy_option,
    force_option,
    json_option,
    keep_throttled_option,
    open_device,
)
from nnbench.errors import NnbenchError
from nnbench.report import tables
from nnbench.runtime.backend import HOST_CLOCK
from nnbench.workloads.base import Case


# -- train ----------------------------------------------------------------------------------------
def _layers_option(text: str) -> tuple[int, ...]:
    try:
        layers = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise NnbenchError(f"--layers {text}: expected comma-separated widths, input first, e.g. 120,300,7") from None
    if len(layers) < 2 or min(layers) < 1:
        raise NnbenchError(f"--layers {text}: needs at least an input and an output layer, every width >= 1")
    return layers


@app.cli.command()
@click.option("--net", type=options.NAME, help="One of the seed's Nets 1-8 (configs/nets.yaml).")
@click.option("--layers", "layers_text", metavar="W0,W1,...", help="Any other layer list, input first: 120,300,7.")
@click.option("--variant", "-v", "version_names", multiple=True, metavar="NAME",
              help="Version to train (repeatable, or `all`). Default: the fastest GPU version (fused; kcm-mass "
                   "where a net does not fit on chip; batched with --batch), or "
                   "sequential (batched-numpy) without a GPU. Choices: "
                   + ", ".join(v.name for v in workloads.variants_of("train")))
@click.option("--batch", type=click.IntRange(min=1), default=1, show_default=True,
              help="Samples per step. 1 trains per sample, as the seed; B > 1 runs the mini-batch versions "
                   "(batched, batched-cublas, batched-wgmma, batched-numpy; each GPU one also as `-graph`, the "
                   "step as one CUDA graph) for a fixed number of --epochs.")
@click.option("--epochs", type=click.IntRange(min=1), default=None,
              help="With --batch: epochs over the noisy training set (default 10).")
@click.option("--train-samples", type=click.IntRange(min=1), default=None,
              help="With --batch: noisy training letters (default 65,536).")
@click.option("--gpus", "--ranks", "ranks", type=options.Counts(), default=None,
              help="With --batch: data-parallel over N MPI ranks, one per GPU (on the CPU backend, N processes). "
                   "nnbench starts mpirun itself, or runs as the ranks of an mpirun/srun it was started under. "
                   "A list (1,2,4) is a scaling run: each count its own set of ranks at --batch samples per rank "
                   "(weak scaling against 1 rank, always run), one table and CSV for all.")
@click.option("--strong", is_flag=True,
              help="With --gpus N,M,...: also strong scaling, every count at the largest count's global batch.")
@click.option("--global-batch", "global_batch", type=click.IntRange(min=1), default=None,
              help="With --gpus N,M,...: strong scaling at this global batch (a multiple of every count; "
                   "implies --strong).")
@click.option("--allreduce", "allreduce", type=click.Choice(["nccl", "mpi"]), default=None,
              help="Gradient exchange with --gpus: nccl (device-side, the default) or mpi (the seed's: through "
                   "the host). The CPU backend always uses mpi.")
@click.option("--bucket-mb", "bucket_mb", type=options.Finite(0.0, 1e6), default=None,
              help="With --gpus: gradients allreduced in buckets of at most this many MB, each started on a side "
                   "stream as soon as its layers' gradients exist, during the backward pass (0: one allreduce after "
                   "the backward pass). Default: chosen per version from the allreduce time measured at a ladder of "
                   "sizes (cached) and the backward pass's timeline; the CPU backend's ranks: 2. --allreduce mpi: "
                   "always one.")
@click.option("--encoding", type=int, help="Input encoding in bits: 60 (6x10) or 120 (10x12); must match the "
                                          "net's input width (default: that width).")
@click.option("--rate", type=options.POSITIVE, default=None,
              help="Learning rate (default: the net's setting, else 0.3; with --batch, the net's batch_rate, else 1, "
                   "on the batch's mean error).")
@click.option("--momentum", type=options.Finite(0.0, 1.0, open_high=True), default=None,
              help="Momentum in [0, 1) (default: the net's setting, else 0.8).")
@click.option("--tolerance", type=options.POSITIVE, default=None,
              help="Stop when an epoch's mean error 1/2 sum (t-o)^2 is at most this (default 1e-5, as in the seed).")
@click.option("--max-iterations", type=click.IntRange(min=1), default=None,
              help="Stop after this many samples (default: the net's setting, else 200,000).")
@click.option("--seed", type=options.SEED, default=0, show_default=True, help="Initial weights and noisy test letters.")
@click.option("--init", "init_kind", default=None, metavar="KIND",
              help="Initial weights: glorot (uniform in ±scale*sqrt(6/(fan_in+fan_out))) or centered (std "
                   "scale/sqrt(fan_in), biases that centre each pre-activation; trains the deep Nets 7 and 8). "
                   "Default: the net's setting in configs/nets.yaml, else glorot.")
@click.option("--init-scale", type=options.POSITIVE, default=None,
              help="The scale of --init (default: the net's setting, else 4, Glorot's advice for sigmoid units).")
@click.option("--blocks", type=click.IntRange(min=1), default=None,
              help="Grid of fused and fused-barrier (default: one block per SM, at most the widest layer's rows).")
@click.option("--test-per-letter", type=click.IntRange(min=1), default=10, show_default=True,
              help="Held-out noisy copies of each letter in the test set.")
@click.option("--compare", "compare", type=click.Choice(["torch"]), help="Add PyTorch eager and CUDA-graph rows.")
@click.option("--torch-iterations", type=click.IntRange(min=10), default=2000, show_default=True,
              help="Iterations of each per-sample PyTorch row (its time per iteration is what is compared).")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False),
              help="CSV path, a new file (default results/train-<gpu>-<time>.csv).")
@force_option
@json_option
@keep_throttled_option
@energy_option
@app.sanitize_option
@click.option("--letters/--no-letters", default=True, help="Print expected against received bits per letter.")
@nogpu.compile_only_options
@backend_option
def train(net, layers_text, version_names, batch, epochs, train_samples, ranks, strong, global_batch, allreduce,
          bucket_mb, encoding, rate,
          momentum,
          tolerance, max_iterations, seed, init_kind, init_scale, blocks, test_per_letter, compare, torch_iterations,
          csv_path, force, letters, compile_only, arch, backend) -> None:
    """Train the seed's character-recognition MLP, per sample or in mini-batches, verify each version,
    and compare.

    \b
    Examples:
      nnbench train --net 8                    # the fastest GPU version, to convergence (CPU: a default length)
      nnbench train --net 1 -v all --compare torch
      nnbench train --layers 120,300,7 -v mass --max-iterations 5000
      nnbench train --net 8 --batch 4096 -v batched -v batched-cublas --compare torch
      nnbench train -v fused --compile-only    # registers, shared memory, spills; no GPU needed
      nnbench train --net 8 --batch 16384 --gpus 4 --allreduce nccl
      nnbench train --net 8 --batch 8192 --gpus 2 --bucket-mb 2 --compare torch   # beside PyTorch DDP
      nnbench train --net 8 --batch 4096 --gpus 1,2,4 --strong --compare torch     # weak and strong scaling
    """
    from nnbench import nets as nets_mod
    from nnbench.workloads.train import batched as batched_mod
    from nnbench.workloads.train import mlp
    from nnbench.workloads.train import session as train_session
    if net is not None and layers_text is not None:
        raise NnbenchError("--net and --layers are exclusive: use one of them")
    if layers_text is not None:
        layers, label, tuned = _layers_option(layers_text), "custom", {}
    else:
        known = nets_mod.load()
        name = "8" if net is None else net
        if name not in known:
            raise NnbenchError(f"--net {net}: unknown; choose from {', '.join(known)} (configs/nets.yaml)")
        layers, label = known[name].layers, f"Net {name}"
        tuned = dict(known[name].settings)  # the net's own settings, where the user gave none
    if encoding is not None and encoding not in (60, 120):
        raise NnbenchError(f"--encoding {encoding}: choose from 60, 120")
    if layers[0] not in (60, 120):
        raise NnbenchError(f"{label} takes {layers[0]} inputs; the glyph encodings are 60 or 120 bits")
    if encoding is not None and encoding != layers[0]:
        raise NnbenchError(f"--encoding {encoding} does not match {label}'s input width {layers[0]}")
    if layers[-1] != 7:
        raise NnbenchError(f"{label} has {layers[-1]} outputs; the targets are 7-bit ASCII codes, so it needs 7")
    names = list(version_names)
    batched_names = [v.name for v in batched_mod.versions()]
    mini = batch > 1 or any(n in batched_names for n in names)
    pool = batched_mod.versions() if mini else mlp.versions()
    if names == ["all"]:
        names = [v.name for v in pool]
    for n in names:
        if n not in [v.name for v in workloads.variants_of("train")]:
            raise NnbenchError(f"--variant {n}: unknown; choose from all, "
                               + ", ".join(v.name for v in workloads.variants_of("train")))
        if n not in [v.name for v in pool]:
            raise NnbenchError(f"--variant {n}: trains one sample at a time; with --batch {batch} choose from "
                               + ", ".join(batched_names) if mini else
                               f"--variant {n}: a mini-batch version; give --batch B > 1 with it")
    if mini:
        for opt, given in (("--tolerance", tolerance), ("--max-iterations", max_iterations), ("--blocks", blocks)):
            if given is not None:
                raise NnbenchError(f"{opt}: applies to per-sample training; with --batch, training runs --epochs")
        rate = tuned.get("batch_rate", batched_mod.DEFAULT_RATE) if rate is None else rate  # not the per-sample rate
        epochs, train_samples = epochs or batched_mod.DEFAULT_EPOCHS, train_samples or batched_mod.DEFAULT_TRAIN_SAMPLES
        if train_samples < batch:
            raise NnbenchError(f"--train-samples {train_samples}: needs at least one batch of {batch}")
    else:
        for opt, given in (("--epochs", epochs), ("--train-samples", train_samples)):
            if given is not None:
                raise NnbenchError(f"{opt}: applies to mini-batch training; give --batch B > 1 with it")
    hyper = mlp.Hyper.from_settings(tuned, rate=rate, momentum=momentum, tolerance=tolerance,
                                    max_iterations=max_iterations, seed=seed, init_scale=init_scale, init=init_kind)
    hyper.check()
    nogpu.check_arch(arch, compile_only)
    if compile_only:
        gpu = [v.name for v in pool if v.backend != "cpu"]
        nogpu.show_resources("train", mlp.plan([n for n in names if n in gpu] or gpu, "cuda", pool), arch, backend)
        return
    counts, ranks = ranks, (ranks[0] if ranks and len(ranks) == 1 else None)
    if counts is not None and len(counts) > 1:
        _scaling(counts, batch, global_batch or (batch * max(counts) if strong else None), mini, train_samples,
                 backend, csv_path, force)
        return
    for opt, given in (("--strong", strong), ("--global-batch", global_batch)):
        if given:
            raise NnbenchError(f"{opt}: applies to a scaling run, --gpus with a list of counts (e.g. --gpus 1,2,4)")
    world = _data_parallel(ranks, allreduce, mini, batch, backend, bucket_mb)
    be = open_device(backend, world.local_rank if world else None)
    cpu_cap = None
    if not be.runs_kernels:
        if names:
            names, _, line = nogpu.cpu_subset(pool, names, {}, "train", "-v")
            nogpu.say(line)
        if not mini and max_iterations is None:
            cpu_cap = mlp.cpu_default_iterations(layers)
            if cpu_cap < hyper.max_iterations:
                hyper = replace(hyper, max_iterations=cpu_cap)
            else:
                cpu_cap = None
    from nnbench import glyphs
    memory.require(be, *mlp.footprint(layers, batch if mini else 1, train_samples if mini else 0,
                                      len(glyphs.LETTERS) * test_per_letter),
                   f"{label} (layers {','.join(map(str, layers))}, --test-per-letter {test_per_letter})",
                   "narrower layers, a smaller batch or a smaller --test-per-letter")
    if world is not None:
        _rank_consoles(world.rank)
    defaulted = not names
    if defaulted:
        names = [batched_mod.default_version(be) if mini else mlp.default_version(be, layers)]
    chosen = mlp.plan(names, be.name, pool)
    env = results.environment(be)
    # Opened once every option is known good, and before anything is printed: a refused --csv is
    # the command's only line, and a refused option leaves no file behind.
    sink = (app.open_sink(csv_path, "train", env["gpu"], force) if world is None or world.rank == 0
            else results.NullSink())
    if defaulted and not be.runs_kernels:
        app.err.print(f"[yellow]nnbench: no GPU: training the {names[0]} (NumPy) version[/]")
    app.out.print(device_line(env))
    head = (f"{label}: layers {'-'.join(map(str, layers))} · {sum(layers)} neurons · "
            f"{nets_mod.Net(label, layers).feedforward_macs:,} multiply-adds per feedforward · init "
            f"{hyper.init} {hyper.init_scale:g} · rate {hyper.rate} · momentum {hyper.momentum}")
    problem = train_session.TrainProblem(str(net or 8) if not layers_text else "custom", tuple(layers), hyper, batch,
                                       epochs or 0, train_samples or 0, test_per_letter, blocks)
    partial = dict(env, layers="-".join(map(str, layers)), encoding=layers[0], seed=hyper.seed, rate=hyper.rate,
                   momentum=hyper.momentum, init=hyper.init, init_scale=hyper.init_scale)
    options = train_session.TrainOptions(torch_iterations=torch_iterations, world=world,
                                       exchange_kind=allreduce or "nccl", bucket_mb=bucket_mb, letters=letters)
    cases = [Case(v, tuple(p.items())) for v, p in sorted(chosen, key=lambda vp: vp[0].step)]

    def train_rows(progress):
        return harness.run(train_session.WORKLOAD, be, cases, [problem], None, None, hyper.seed, env,
                           vendor=compare == "torch", options=replace(options, progress=progress))
    if mini:
        app.out.print(f"{head} · batch {batch} · {epochs} epochs of {train_samples:,} noisy letters")
        if world is not None:
            app.out.print(f"data-parallel over {world.size} ranks ({batch // world.size} samples each per step), "
                      f"gradients through {(allreduce or 'nccl') if be.runs_kernels else 'mpi'}")
        records = _stream(sink, epochs * (train_samples // batch), "step", train_rows, problem,
                          dict(partial, batch=batch))
        clock = (f"median step time, {be.clock_name}, steady state (PyTorch: events around whole epochs)"
                 if be.runs_kernels else be.clock_name)
        app.out.print(tables.batch_table(records, f"{label} · mini-batch training, B = {batch} · {clock}"))
        check_what = f"weights after {batched_mod.CHECK_STEPS} steps"
    else:
        app.out.print(f"{head} · tolerance {hyper.tolerance:g} · at most {hyper.max_iterations:,} iterations")
        records = _stream(sink, hyper.max_iterations, "it", train_rows, problem, partial)
        clock = (f"{be.clock_name} around whole epochs (sequential: {HOST_CLOCK})" if be.runs_kernels
                 else be.clock_name)
        app.out.print(tables.train_table(records, f"{label} · per-sample training · time per iteration: {clock}"))
        check_what = f"weights after {mlp.CHECK_ITERATIONS} iterations"
        if cpu_cap is not None and any(r.get("iterations") == cpu_cap and not r.get("converged") for r in records):
            app.out.print(f"stopped after {cpu_cap:,} iterations (CPU default; "
                          "--max-iterations for more)")
    if compare == "torch" and not be.has_vendor_libs:
        app.out.print("PyTorch comparison: needs the GPU backend")
    shown = next((r for r in records if r.get("received")), None)
    if shown is not None:
        app.out.print(_letters_view(shown))
    for r in records:
        if r.get("status") in results.FAILED:
            why = r.get("error") or f"{check_what} differ from the float64 reference by " \
                                    f"{r.get('weights_rel_err'):.2e} > {r.get('weights_rtol'):.2e}"
            app.out.print(f"[red]{r['status']}[/] {r['variant']}: {why}")
    if getattr(sink, "path", None):
        app.print_csv(sink.path)
    if any(r.get("status") in results.FAILED for r in records):
        sys.exit(1)


def _rank_consoles(rank: int) -> None:
    """Inside MPI ranks: rank 0 reports for all, the others stay silent; mpirun hands the ranks a
    pseudo-terminal, so rich would otherwise colour and squeeze the table into 80 columns."""
    app.out = Console(highlight=False, width=180, color_system=None, quiet=rank != 0)
    app.err = Console(stderr=True, highlight=False, color_system=None, quiet=rank != 0)


def _data_parallel(ranks: int | None, allreduce: str | None, mini: bool, batch: int, backend: str,
                   bucket_mb: float | None = None):
    """The MPI world this process is a rank of; or, when --gpus N > 1 asks for ranks that do not
    exist yet, start them (mpirun running this same command) and exit with their status."""
    from nnbench.runtime import exchange
    started = exchange.started_size()
    if (ranks or 1) == 1 and started == 1:
        for opt, given in (("--allreduce", allreduce), ("--bucket-mb", bucket_mb)):
            if given is not None:
                raise NnbenchError(f"{opt} {given:g}: applies with --gpus N > 1" if opt == "--bucket-mb" else
                                   f"{opt} {given}: applies with --gpus N > 1")
        return None
    if not mini:
        raise NnbenchError("--gpus: data-parallel training runs mini-batches; give --batch B > 1")
    if started > 1:
        if ranks is not None and ranks != started:
            raise NnbenchError(f"--gpus {ranks}: this run was started as {started} MPI ranks; give --gpus {started} "
                               "or leave it out")
        return exchange.world()
    if batch % ranks:
        raise NnbenchError(f"--batch {batch} does not split evenly over --gpus {ranks}: give a multiple of {ranks} "
                           "(uneven splits are refused, so every rank's step takes the same time)")
    _refuse_missing_gpus(ranks, backend)
    sys.exit(exchange.launch(ranks, app.ARGV))


def _refuse_missing_gpus(ranks: int, backend: str) -> None:
    if backend != "cpu":
        from nnbench.runtime import device_count
        have = device_count()
        if have < ranks and backend == "cuda":
            raise NnbenchError(f"--gpus {ranks}: this machine has {have} GPU(s); give at most {have}, or "
                               "--backend cpu for CPU ranks")


def _scaling(counts: tuple[int, ...], batch: int, global_batch: int | None, mini: bool, train_samples: int | None,
             backend: str, csv_path, force: bool) -> None:
    """A scaling run (nnbench/cli/scaling.py): every count's run, then one table and one CSV of them all."""
    from nnbench.cli import scaling as scaling_runs
    from nnbench.report import scaling
    from nnbench.runtime import exchange
    label = ",".join(map(str, counts))
    if not mini:
        raise NnbenchError(f"--gpus {label}: data-parallel training runs mini-batches; give --batch B > 1")
    if exchange.started_size() > 1:
        raise NnbenchError(f"--gpus {label}: a scaling run starts each count's ranks itself; run it outside "
                           "mpirun/srun, or give one count")
    counts = tuple(sorted({1, *counts}))  # the one-rank reference is always measured in the same call
    _refuse_missing_gpus(max(counts), backend)
    runs = scaling_runs.plan(counts, batch, global_batch)
    most = max(b for _, b in runs)
    if train_samples < most:
        raise NnbenchError(f"--train-samples {train_samples}: a scaling run's largest global batch is {most:,}; "
                           f"give at least {most:,}")
    sink = app.open_sink(csv_path, "train-scaling", backend, force)
    try:
        app.out.print(f"scaling run: ranks {', '.join(map(str, counts))} at {batch:,} samples per rank"
                      + (f"; strong scaling at a global batch of {global_batch:,}" if global_batch else ""))
        rows = scaling.add_efficiency(scaling_runs.run_counts(app.ARGV, runs, app.out.print))
        for r in rows:
            sink.append(r)
    finally:
        sink.close()
    clock = rows[0].get("timing") if rows else None
    app.out.print(scaling.scaling_table(rows, f"scaling · weak: T1(B/N) / TN(B) · strong: T1(B) / (N TN(B)) · "
                                              f"B global batch, N ranks{' · ' + clock if clock else ''}"))
    if getattr(sink, "path", None):
        app.print_csv(sink.path)
    if len(rows) == 0 or any(r.get("status") in results.FAILED for r in rows) or \
            len({(r.get("ranks"), r.get("batch")) for r in rows}) < len(runs):
        sys.exit(1)


PLAIN_PROGRESS_S = 60.0  # without a terminal (a CI log, a file), a progress line this often per version


def _stream(sink, total: int, unit: str, records, problem, partial: dict) -> list[dict]:
    """Run `records(progress)`, a generator of result rows, with a rich progress bar per version
    (current error in it); each row goes to the CSV the moment it exists. Where stderr is no
    terminal the bar cannot redraw, so a line a minute says how far each version is. On Ctrl-C,
    the version in training gets a row too (`partial` plus how far it got, status ERROR), so an
    interrupted run keeps what it did."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                        TextColumn("{task.completed:,.0f} " + unit), TextColumn("error {task.fields[error]}"),
                        TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=app.err)
    tasks, rows, said, start, last = {}, [], {}, time.monotonic(), {}

    def on_progress(name, done, e):
        last[name] = (done, e)
        if name not in tasks:
            tasks[name] = progress.add_task(name, total=total, error="—")
        progress.update(tasks[name], completed=done, error=f"{e:.2e}")
        now = time.monotonic()
        if not app.err.is_terminal and now - said.get(name, -math.inf) >= PLAIN_PROGRESS_S:
            said[name] = now
            left = f", about {(now - start) * (total - done) / done:,.0f} s left at most" if done else ""
            app.err.print(f"{name}: {done:,} of {total:,} {unit}, error {e:.2e}, {now - start:,.0f} s{left}")

    try:
        with progress:
            for rec in records(on_progress):
                sink.append(rec)
                rows.append(rec)
                last.pop(rec.get("variant"), None)
    except KeyboardInterrupt:
        for name, (done, e) in last.items():
            count = "steps" if unit == "step" else "iterations"
            from nnbench.workloads.train.session import unify
            sink.append(unify(dict(partial, version=name, status="ERROR", final_error=e, **{count: done},
                                   error=f"interrupted (Ctrl-C) after {done:,} {count}, error {e:.2e}"), problem))
        raise
    finally:
        sink.close()
    return rows


def _letters_view(rec: dict) -> str:
    """Expected against received bits for each letter, from what the trained version's record carries
    (train_session.received_bits: its outputs for the first held-out noisy copy of each letter)."""
    from nnbench import glyphs
    lines, row = [f"{rec['variant']}: expected -> received on held-out noisy letters (first copy of each):"], []
    for c, bits in zip(glyphs.LETTERS, rec["received"].split()):
        want = "".join(str(int(b)) for b in glyphs.target(c))
        mark = "[green]✓[/]" if bits == want else "[red]✗[/]"
        row.append(f"{c} {want}->{bits} {mark}")
        if len(row) == 6:
            lines.append("   ".join(row))
            row = []
    if row:
        lines.append("   ".join(row))
    return "\n".join(lines)
