"""`nnbench conv`: the convolution paths on NCHW layers, or a whole model (LeNet-5)."""

from __future__ import annotations

import sys

import click

from nnbench import harness, memory, options, results, workloads
from nnbench.cli import app, nogpu
from nnbench.cli.app import (
    autotune_option,
    backend_option,
    device_line,
    force_option,
    json_option,
    open_device,
    timing_options,
)
from nnbench.errors import NnbenchError
from nnbench.report import tables
from nnbench.workloads.base import Case


# -- conv -----------------------------------------------------------------------------------------
@app.cli.command()
@click.option("--path", "-p", "paths_", multiple=True, metavar="NAME",
              help="Forward path (repeatable; default: all for the backend). Choices: "
                   + ", ".join(v.name for v in workloads.variants_of("conv", kinds=("forward",))) + ".")
@click.option("--set", "sets", multiple=True, metavar="NAME", help="A named layer set of configs/conv.yaml "
              "(lenet5, resnet, odd; repeatable).")
@click.option("--n", "n", type=int, help="Images.")
@click.option("--c", "c", type=int, help="Input channels.")
@click.option("--h", "h", type=int, help="Input height.")
@click.option("--w", "w", type=int, help="Input width.")
@click.option("--k", "k", type=int, help="Output maps (filters).")
@click.option("--r", "r", type=int, help="Filter size (R x R).")
@click.option("--stride", type=int, default=1, show_default=True)
@click.option("--pad", type=int, default=0, show_default=True)
@click.option("--tile", type=int, default=None, help="TILE of the direct, constant and tiled paths.")
@click.option("--kb", type=int, default=None, help="KB (output maps per block) of the tiled path.")
@timing_options
@app.sanitize_option
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False),
              help="CSV path, a new file (default results/conv-<gpu>-<time>.csv).")
@click.option("--no-cudnn", is_flag=True, help="Skip the cuDNN baseline.")
@click.option("--backward", is_flag=True, help="Also run the backward paths (data and filter gradients: unroll, "
                                               "direct and implicit GEMM), each checked against float64, beside "
                                               "cuDNN's backward.")
@click.option("--model", type=click.Choice(["lenet5"]), default=None,
              help="A whole model instead of layers: LeNet-5's forward pass and SGD step on 32x32 letter images "
                   "(--n is the batch, default 64), checked against float64, beside PyTorch; on the unroll and "
                   "the implicit-GEMM paths, or the one given by --path (unroll or implicit).")
@click.option("--seed", type=options.SEED, default=0, show_default=True, help="Seed of the random inputs.")
@autotune_option
@force_option
@json_option
@nogpu.compile_only_options
@backend_option
def conv(paths_, sets, n, c, h, w, k, r, stride, pad, tile, kb, budget, cold, csv_path, no_cudnn, backward, model,
         seed, no_autotune, force, compile_only, arch, backend) -> None:
    """Convolution forward paths (direct, constant memory, shared-memory tiled, unroll + GEMM) on NCHW
    layers, each verified against float64, timed, and compared with cuDNN.

    \b
    Examples:
      nnbench conv --set resnet
      nnbench conv --n 32 --c 64 --h 56 --w 56 --k 64 --r 3 --pad 1 -p tiled -p unroll
      nnbench conv -p tiled --tile 16 --compile-only   # registers, shared memory, spills; no GPU needed
    """
    from nnbench.workloads.conv import problem as conv_problem
    from nnbench.workloads.conv import session as conv_session
    nogpu.check_arch(arch, compile_only)
    if model is not None:
        if compile_only:
            raise NnbenchError(f"--model {model}: `nnbench profile conv -v {model} --model {model}` shows its "
                               "kernels' resources")
        _conv_model(model, n, budget, cold, csv_path, force, no_cudnn, seed, backend, paths_,
                    [x is not None for x in (c, h, w, k, r)] + [bool(sets), backward])
        return
    given = [x is not None for x in (n, c, h, w, k, r)]
    if any(given) and not all(given):
        raise NnbenchError("--n, --c, --h, --w, --k and --r go together: give all six, or use --set")
    if not any(given) and (stride, pad) != (1, 0):  # a set's layers carry their own: silently ignored before
        raise NnbenchError(f"--{'stride' if stride != 1 else 'pad'}: goes with a layer of --n, --c, --h, --w, --k "
                           "and --r (a --set's layers carry their own)")
    shapes = []
    if all(given):
        shape = conv_problem.ConvShape(n, c, h, w, k, r, stride, pad)
        shape.validate()
        shapes.append(shape)
    known = conv_problem.load_sets() if sets or not shapes else {}
    for name in sets:
        if name not in known:
            raise NnbenchError(f"--set {name}: unknown; choose from {', '.join(known)} (configs/conv.yaml)")
        shapes += known[name]
    overrides = {key: val for key, val in (("TILE", tile), ("KB", kb)) if val is not None}
    backward_paths = [(v, v.defaults()) for v in workloads.variants_of("conv", kinds=("backward",))] if backward else []
    if backend == "cuda" or compile_only:
        chosen = conv_session.plan(list(paths_), "cuda", overrides)
        if compile_only:
            nogpu.show_resources("conv", chosen + backward_paths, arch, backend)
            return
    on_host = {v.name for v in workloads.variants_of("conv", "cpu", ("forward",))}
    gpu_named = [name for name in paths_ if name not in on_host]
    if overrides or gpu_named:  # a bad name or value is refused as on a GPU, before the CPU path leaves it out
        conv_session.plan(gpu_named, "cuda", overrides)
    be = open_device(backend)
    if not be.runs_kernels:
        paths_, overrides, line = nogpu.cpu_subset(workloads.variants_of("conv", kinds=("forward",)), list(paths_),
                                                   overrides, "conv", "-p", ("--backward",) if backward else ())
        nogpu.say(line)
        backward = False
    chosen = conv_session.plan(list(paths_), be.name, overrides)
    shapes = shapes or known["resnet"][:1]
    for shape in shapes:
        memory.require(be, *shape.footprint(), f"layer {shape.label}", "a smaller layer")
    env = results.environment(be)
    sink = app.open_sink(csv_path, "conv", env["gpu"], force)
    path = sink.path
    app.out.print(device_line(env))
    settings = app.settings(budget, cold)
    cases = [Case(v, tuple(p.items())) for v, p in chosen]
    if backward:
        cases += [Case.defaults(v) for v in workloads.variants_of("conv", kinds=("backward",))]
    records = app.stream(sink, harness.run(conv_session.WORKLOAD, be, cases, shapes, settings,
                                                             conv_problem.DEFAULT_RTOL, seed, env, vendor=not no_cudnn,
                                                             tuner=app.tuner(be, no_autotune, overrides)))
    app.out.print(tables.conv_table(records, f"convolution forward · NCHW fp32 · median of samples ({be.clock_name})"
                                if be.runs_kernels else f"convolution forward · NumPy ({be.clock_name})"))
    for rec in records:
        if rec.get("status") in ("SKIP", "ERROR", "FAIL") and rec.get("error"):
            app.out.print(f"{rec['status']} {rec['variant']} {rec['shape']}: {rec['error']}")
    app.print_csv(path)
    if any(rec.get("status") in results.FAILED for rec in records):
        sys.exit(1)


def _conv_model(model: str, batch, budget, cold, csv_path, force, no_torch, seed, backend, paths_,
                others: list[bool]) -> None:
    from nnbench.workloads.conv import lenet
    if any(others):
        raise NnbenchError(f"--model {model}: takes --n (the batch) and --path only; the layers are the model's")
    for name in paths_:
        if name not in lenet.PATHS:
            raise NnbenchError(f"--path {name}: with --model {model}, choose from {', '.join(lenet.PATHS)}")
    batch = 64 if batch is None else batch
    if batch < 1:
        raise NnbenchError(f"--n {batch}: the batch must be >= 1")
    be = open_device(backend)
    if not be.runs_kernels:
        raise NnbenchError(f"--model {model}: needs a GPU; `nnbench profile conv -v {model} --model {model}` shows "
                           "its kernels' resources without one")
    from nnbench.workloads.conv import problem as conv_problem
    from nnbench.workloads.conv import session as conv_session
    env = results.environment(be)
    app.out.print(device_line(env))
    sink = app.open_sink(csv_path, "conv", env["gpu"], force)
    path = sink.path
    by_path = {p: name for name, p in lenet.VARIANT_PATHS.items()}
    cases = [Case.defaults(workloads.get("conv", by_path[p]))
             for p in dict.fromkeys(paths_ or lenet.DEFAULT_PATHS)]
    records = app.stream(sink, harness.run(conv_session.WORKLOAD, be, cases, [conv_session.LeNetProblem(batch)],
                                           app.settings(budget, cold), conv_problem.DEFAULT_RTOL, seed, env,
                                           vendor=not no_torch))
    app.out.print(tables.conv_table(records, f"LeNet-5 · batch {batch} · our step checked against float64 "
                                         f"(rel_err: weight changes and loss)"))
    app.print_csv(path)
    if any(rec.get("status") in results.FAILED for rec in records):
        sys.exit(1)

