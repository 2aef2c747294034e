"""The command line: parse options, pick suites, render output. Nothing else lives here.

Every user error (a NnbenchError, or a click usage error) becomes one line on stderr and exit
code 2; a failed verification or a kernel fault exits 1 after the results are written.
"""

from __future__ import annotations

import math
import re
import sys
import time
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from nnbench import __version__, measure, registry, results, tables
from nnbench.errors import NnbenchError
from nnbench.runtime import open_backend
from nnbench.suites import gemm as gemm_suite

# Wide when piped (CI logs, pasted output), so the ladder table is never squeezed into 80 columns.
out = Console(highlight=False, width=None if sys.stdout.isatty() else 180)
err = Console(stderr=True, highlight=False)


ARGV: list[str] = []  # this invocation's arguments, for starting the same command as MPI ranks


def _who() -> str:
    """'rank R: ' inside one rank of several (so a dying rank names itself), else ''."""
    from nnbench.runtime.exchange import started_size
    if started_size() <= 1:
        return ""
    import os
    rank = next((os.environ[v] for v in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")
                 if v in os.environ), "?")
    return f"rank {rank}: "


class NnbenchGroup(click.Group):
    """Runs click without its multi-line usage dumps: any error is one line and exit code 2."""

    def main(self, args=None, prog_name=None, **kw):
        kw["standalone_mode"] = False
        ARGV[:] = list(sys.argv[1:] if args is None else args)
        try:
            rc = super().main(args=args, prog_name=prog_name or "nnbench", **kw)
        except click.exceptions.Exit as e:
            sys.exit(e.exit_code)
        except click.exceptions.Abort:
            click.echo("nnbench: aborted", err=True)
            sys.exit(130)
        except click.ClickException as e:
            click.echo(f"nnbench: error: {_who()}{e.format_message()}", err=True)
            sys.exit(2)
        except NnbenchError as e:
            click.echo(f"nnbench: error: {_who()}{e}", err=True)
            sys.exit(2)
        sys.exit(rc if isinstance(rc, int) else 0)


@click.group(cls=NnbenchGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nnbench")
def cli() -> None:
    """Benchmark and profile the CUDA kernels behind neural-network training.

    Every kernel is checked against a float64 NumPy reference, then timed with CUDA events.
    """


def main() -> None:
    cli()


# -- shared option groups -------------------------------------------------------------------------
def timing_options(f):
    f = click.option("--budget", type=click.FloatRange(min=0.0, min_open=True), default=0.5, show_default=True,
                     help="Time budget per case in seconds; sampling stops earlier once noise <= 1%.")(f)
    f = click.option("--cold", is_flag=True, help="Flush L2 before every sample (one launch per sample).")(f)
    return f


def backend_option(f):
    return click.option("--backend", type=click.Choice(["cuda", "cpu", "auto"]), default="cuda", show_default=True,
                        help="cuda: PyCUDA on GPU 0. cpu: the NumPy path. auto: cuda if it works, else cpu.")(f)


def param_options(*suites: str):
    """One --name option per kernel parameter in the registry (TS -> --ts, WPT -> --wpt, ...), for
    every parameter name of the given suites (the first declaration's help)."""
    first: dict[str, object] = {}
    for suite in suites:
        for p in registry.all_param_names(suite):
            first.setdefault(p.name, p)
    params = list(first.values())

    def deco(f):
        for p in reversed(params):
            f = click.option(p.option, p.name, type=int, default=None, help=f"{p.name}: {p.help}.")(f)
        return f
    return deco


def _open(backend: str, device: int = 0):
    be, note = open_backend(backend, device)
    if note:
        err.print(f"[yellow]nnbench: {note}[/]")
    return be


def _device_line(env: dict) -> str:
    if env.get("backend") != "cuda":
        return f"CPU backend ({env.get('device_name')}, {env.get('sms')} cores): NumPy float32"
    return (f"{env['gpu']} · sm_{env['cc'].replace('.', '')} · {env['sms']} SMs · FP32 peak "
            f"{env['fp32_peak_tflops']:.1f} TFLOP/s at {env['max_sm_clock_mhz']:.0f} MHz · driver {env['driver']} "
            f"· CUDA {env['cuda']} · nvcc {env.get('nvcc')}")


# -- devices --------------------------------------------------------------------------------------
@cli.command()
@click.option("--measure", "do_measure", is_flag=True,
              help="Also measure the FP32 FMA ceiling and copy bandwidth with nnbench's own kernels.")
def devices(do_measure: bool) -> None:
    """List GPUs: compute capability, SMs, clocks, memory, theoretical FP32 FFMA and dense TF32 tensor-core
    peaks (3xTF32 kernels are judged against a third of the latter) and DRAM bandwidth."""
    from nnbench.errors import BackendUnavailable
    try:
        from nnbench.runtime import cuda
    except BackendUnavailable as e:
        raise NnbenchError(str(e)) from None
    n = cuda.device_count()
    if n == 0:
        raise NnbenchError("no CUDA GPU found on this machine")
    t = Table(title="CUDA devices", title_justify="left", header_style="bold")
    cols = ["#", "name", "CC", "SMs", "SM MHz", "mem MHz", "memory", "L2", "FP32 FFMA peak", "TF32 tensor peak",
            "DRAM peak"]
    if do_measure:
        cols += ["FMA measured", "copy measured", "SM→SM", "grid barrier"]
    for c in cols:
        t.add_column(c, justify="left" if c in ("name",) else "right")
    from nnbench.suites.ceilings import measure_ceilings
    for i in range(n):
        d = cuda.device_info(cuda.drv.Device(i))
        row = [str(i), d.name, f"{d.cc[0]}.{d.cc[1]}", str(d.sm_count), f"{d.sm_clock_mhz:.0f}",
               f"{d.mem_clock_mhz:.0f}", f"{d.mem_bytes / 2**30:.1f} GiB", f"{d.l2_bytes / 2**20:.0f} MiB",
               f"{d.fp32_peak_flops / 1e12:.1f} TFLOP/s",
               f"{d.tf32_peak_flops / 1e12:.1f} TFLOP/s" if d.tf32_peak_flops else "—",
               f"{d.dram_peak_bytes / 1e9:,.0f} GB/s"]
        if do_measure:
            be = cuda.CudaBackend(i)
            c = measure_ceilings(be)
            be.close()
            row += [f"{c['fma_tflops']:.1f} TFLOP/s ({c['fma_pct_theory']:.0f}%)",
                    f"{c['copy_gbs']:,.0f} GB/s ({c['copy_pct_theory']:.0f}%)", f"{c['handoff_us']:.2f} µs",
                    f"{c['grid_barrier_us']:.2f} µs"]
        t.add_row(*row)
    out.print(t)
    if do_measure:
        out.print("FMA: 8 independent FMA chains per thread, full occupancy. copy: grid-stride float4 copy of "
                  "1 GiB, counting bytes read + written. % = of the theoretical figure at the maximum clock. "
                  "SM→SM: one-way latency of a tagged 8-byte value passed between two blocks through L2. grid "
                  "barrier: one counter barrier across one block per SM.")


# -- conv -----------------------------------------------------------------------------------------
@cli.command()
@click.option("--path", "-p", "paths_", multiple=True, metavar="NAME",
              help="Forward path (repeatable; default: all for the backend). Choices: "
                   + ", ".join(v.name for v in registry.suite_variants("conv")) + ".")
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
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), help="CSV path (default results/conv-…).")
@click.option("--no-cudnn", is_flag=True, help="Skip the cuDNN baseline.")
@click.option("--backward", is_flag=True, help="Also run the backward paths (data and filter gradients: unroll "
                                               "and direct), each checked against float64.")
@click.option("--model", type=click.Choice(["lenet5"]), default=None,
              help="A whole model instead of layers: LeNet-5's forward pass and SGD step on 32x32 letter images "
                   "(--n is the batch, default 64), checked against float64, beside PyTorch.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random inputs.")
@backend_option
def conv(paths_, sets, n, c, h, w, k, r, stride, pad, tile, kb, budget, cold, csv_path, no_cudnn, backward, model,
         seed, backend) -> None:
    """Convolution forward paths (direct, constant memory, shared-memory tiled, unroll + GEMM) on NCHW
    layers, each verified against float64, timed, and compared with cuDNN.

    \b
    Examples:
      nnbench conv --set resnet
      nnbench conv --n 32 --c 64 --h 56 --w 56 --k 64 --r 3 --pad 1 -p tiled -p unroll
    """
    from nnbench.suites import conv as conv_suite
    if model is not None:
        _conv_model(model, n, budget, cold, csv_path, no_cudnn, seed, backend,
                    [x is not None for x in (c, h, w, k, r)] + [bool(sets), bool(paths_), backward])
        return
    given = [x is not None for x in (n, c, h, w, k, r)]
    if any(given) and not all(given):
        raise NnbenchError("--n, --c, --h, --w, --k and --r go together: give all six, or use --set")
    shapes = []
    if all(given):
        shape = conv_suite.ConvShape(n, c, h, w, k, r, stride, pad)
        shape.validate()
        shapes.append(shape)
    known = conv_suite.load_sets() if sets or not shapes else {}
    for name in sets:
        if name not in known:
            raise NnbenchError(f"--set {name}: unknown; choose from {', '.join(known)} (configs/conv.yaml)")
        shapes += known[name]
    overrides = {key: val for key, val in (("TILE", tile), ("KB", kb)) if val is not None}
    if backend != "auto":
        conv_suite.plan(list(paths_), backend, overrides)
    if backward and backend == "cpu":
        raise NnbenchError("--backward: the backward paths need the cuda backend (a GPU)")
    be = _open(backend)
    if backward and be.name != "cuda":
        raise NnbenchError("--backward: the backward paths need the cuda backend (a GPU)")
    chosen = conv_suite.plan(list(paths_), be.name, overrides)
    shapes = shapes or known["resnet"][:1]
    env = results.environment(be)
    path = csv_path or results.default_path("conv", env["gpu"])
    sink = results.CsvSink(path, fields=results.CONV_FIELDS)
    out.print(_device_line(env))
    settings = measure.TimingSettings(budget_s=budget, cold=cold)
    runs = [conv_suite.run(be, chosen, shapes, settings, with_cudnn=not no_cudnn, seed=seed, env=env)]
    if backward:
        back = [(v, v.defaults()) for v in registry.suite_variants("conv-backward")]
        runs.append(conv_suite.run_backward(be, back, shapes, settings, seed=seed, env=env))
    records = []
    try:
        with err.status("") as status:
            for rec in (r for gen in runs for r in gen):
                sink.append(rec)
                records.append(rec)
                status.update(f"{rec['variant']} {rec['shape']}: {rec['status']}")
    finally:
        sink.close()
    out.print(tables.conv_table(records, "convolution forward · NCHW fp32 · median of CUDA-event samples"
                                if be.name == "cuda" else "convolution forward · NumPy (host clock)"))
    for rec in records:
        if rec.get("status") in ("SKIP", "ERROR", "FAIL") and rec.get("error"):
            out.print(f"{rec['status']} {rec['variant']} {rec['shape']}: {rec['error']}")
    out.print(f"CSV: {path}")
    if any(rec.get("status") in results.FAILED for rec in records):
        sys.exit(1)


def _conv_model(model: str, batch, budget, cold, csv_path, no_torch, seed, backend, others: list[bool]) -> None:
    from nnbench.suites import lenet
    if any(others):
        raise NnbenchError(f"--model {model}: takes --n (the batch) only; the layers are the model's")
    batch = 64 if batch is None else batch
    if batch < 1:
        raise NnbenchError(f"--n {batch}: the batch must be >= 1")
    if backend == "cpu":
        raise NnbenchError(f"--model {model}: needs the cuda backend (a GPU)")
    be = _open(backend)
    if be.name != "cuda":
        raise NnbenchError(f"--model {model}: needs the cuda backend (a GPU)")
    env = results.environment(be)
    out.print(_device_line(env))
    path = csv_path or results.default_path("conv", env["gpu"])
    sink = results.CsvSink(path, fields=results.CONV_FIELDS)
    records = []
    try:
        for rec in lenet.run(be, batch, seed=seed, settings=measure.TimingSettings(budget_s=budget, cold=cold),
                             with_torch=not no_torch, env=env):
            sink.append(rec)
            records.append(rec)
    finally:
        sink.close()
    out.print(tables.conv_table(records, f"LeNet-5 · batch {batch} · our step checked against float64 "
                                         f"(rel_err: weight changes and loss)"))
    out.print(f"CSV: {path}")
    if any(rec.get("status") in results.FAILED for rec in records):
        sys.exit(1)


# -- profile --------------------------------------------------------------------------------------
@cli.command()
@click.argument("suite", metavar="SUITE")
@click.option("--variant", "-v", "variant", required=True, metavar="NAME", help="The variant (ladder step, version).")
@param_options("gemm", "mlp")  # every suite's parameters; the profiled variant says which apply
@click.option("--m", "m", type=click.IntRange(min=1), default=4096, show_default=True, help="GEMM rows of A and C.")
@click.option("--n", "n", type=click.IntRange(min=1), default=4096, show_default=True, help="GEMM columns of B and C.")
@click.option("--k", "k", type=click.IntRange(min=1), default=4096, show_default=True, help="GEMM inner size.")
@click.option("--net", default="8", show_default=True, help="MLP: the net (configs/nets.yaml) the version trains.")
@click.option("--batch", type=click.IntRange(min=1), default=1, show_default=True,
              help="MLP: samples per step (the mini-batch versions).")
@click.option("--ncu", "with_ncu", is_flag=True, help="Also run Nsight Compute on one launch of the kernel.")
@click.option("--kernel", default=None, metavar="NAME",
              help="The kernel --ncu profiles (default: the variant's main one, e.g. gemm, forward, fused_train).")
@click.option("--arch", default=None, metavar="sm_XY",
              help="Without a GPU: the architecture to compile for and take limits from (default sm_90).")
@click.option("--launch-only", is_flag=True, hidden=True, help="Launch the kernel only (what --ncu profiles).")
@backend_option
def profile(suite, variant, m, n, k, net, batch, with_ncu, kernel, arch, launch_only, backend, **params) -> None:
    """Profile one kernel: resources and occupancy, the hot loop's instruction mix from the SASS, and
    (GEMM, on a GPU) its achieved FLOP/s and bytes/s on the roofline; --ncu adds Nsight Compute.

    \b
    Examples:
      nnbench profile gemm --variant tiled --ts 32
      nnbench profile gemm -v coarsened --ts 32 --wpt 8 --ncu
      nnbench profile mlp -v fused --net 8 --ncu
      nnbench profile mlp -v batched --net 8 --batch 4096
      nnbench profile mlp -v batched --backend cpu --arch sm_90
    """
    from nnbench import nets as nets_mod
    from nnbench.suites import profile as profile_suite
    overrides = {name.upper(): v for name, v in params.items() if v is not None}
    shape = gemm_suite.Shape(m, n, k)
    profile_suite.variant_params(suite, variant, overrides)  # bad input before the GPU is opened
    if suite == "mlp" and str(net) not in nets_mod.load():
        raise NnbenchError(f"--net {net}: unknown; choose from {', '.join(nets_mod.load())} (configs/nets.yaml)")
    layers = nets_mod.get(net).layers if suite == "mlp" else None
    if arch is not None and not re.fullmatch(r"sm_\d{2,3}a?", arch):
        raise NnbenchError(f"--arch {arch}: expected sm_XY, for example sm_90")
    be = _open(backend)
    if launch_only:
        profile_suite.launch_only(be, suite, variant, overrides, shape, layers, batch)
        return
    if with_ncu and be.name != "cuda":
        raise NnbenchError("--ncu: needs the cuda backend (a GPU)")
    child = [sys.executable, "-m", "nnbench", *ARGV, "--launch-only"]
    prof = profile_suite.profile(be, suite, variant, overrides, shape, arch, with_ncu, child, layers=layers,
                                 batch=batch, kernel=kernel)
    out.print(_device_line(results.environment(be)))
    for t in tables.profile_tables(prof):
        out.print(t)
    if be.name != "cuda":
        out.print("no GPU: resources and instruction mix only; achieved figures, the roofline and --ncu need one")


@cli.command()
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
    out.print(f"{kind} plot of {len(df)} rows: {out_path}")


# -- gemm -----------------------------------------------------------------------------------------
@cli.command()
@click.option("--variant", "-v", "variants", multiple=True, metavar="NAME",
              help="Ladder step to run (repeatable; default: all steps for the backend). "
                   f"Choices: {', '.join(v.name for v in registry.suite_variants('gemm'))}.")
@param_options("gemm")
@click.option("--m", "m", type=click.IntRange(min=1), help="Rows of A and C.")
@click.option("--n", "n", type=click.IntRange(min=1), help="Columns of B and C.")
@click.option("--k", "k", type=click.IntRange(min=1), help="Columns of A, rows of B.")
@click.option("--size", "sizes", type=click.IntRange(min=1), multiple=True,
              help="Square size M=N=K (repeatable). Default 4096 on cuda, 1024 on cpu.")
@timing_options
@click.option("--rtol", type=click.FloatRange(min=0.0, min_open=True), default=gemm_suite.DEFAULT_RTOL,
              show_default=True, help="Largest ||C-ref||/||ref|| that passes.")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, writable=True),
              help="Write the CSV here (default: results/gemm-<gpu>-<time>.csv).")
@click.option("--no-cublas", is_flag=True, help="Skip the cuBLAS baseline.")
@click.option("--seed", type=int, help="Seed for the random inputs (default: fresh entropy, recorded in the CSV).")
@backend_option
def gemm(variants, m, n, k, sizes, budget, cold, rtol, csv_path, no_cublas, seed, backend, **params) -> None:
    """Run the GEMM ladder (column-major SGEMM, C = alpha*A*B + beta*C): verify, time, compare.

    \b
    Examples:
      nnbench gemm                          # every step at 4096^3, with cuBLAS
      nnbench gemm --ts 32 --wpt 8          # steps 2 and 3 take TS and WPT
      nnbench gemm -v warptile --bk 8 --m 1000 --n 777 --k 1234
    """
    overrides = {name: v for name, v in params.items() if v is not None}
    if any(x is not None for x in (m, n, k)):
        if None in (m, n, k):
            raise NnbenchError("--m, --n and --k go together: give all three, or use --size")
        if sizes:
            raise NnbenchError("--size and --m/--n/--k are exclusive: use one of them")
    overrides = {p.upper(): v for p, v in overrides.items()}
    # Validate options against the registry before opening the GPU, so a bad option is reported
    # the same way on any machine; device limits are checked once the device is known.
    if backend != "auto":
        gemm_suite.plan(list(variants), overrides, None, backend)
    shapes = [gemm_suite.Shape(m, n, k)] if m else [gemm_suite.Shape(s, s, s) for s in sizes]
    for s in shapes:
        gemm_suite.validate_shape(s)
    be = _open(backend)
    cases = gemm_suite.plan(list(variants), overrides, be.device, be.name)
    shapes = shapes or [gemm_suite.Shape(s, s, s) for s in ([4096] if be.name == "cuda" else [1024])]

    env = results.environment(be)
    path = csv_path or results.default_path("gemm", env["gpu"])
    sink = results.CsvSink(path)
    settings = measure.TimingSettings(budget_s=budget, cold=cold)
    out.print(_device_line(env))
    records = []
    total = len(shapes) * (len(cases) + (0 if no_cublas or be.name != "cuda" else 1))
    try:
        with err.status("") as status:
            for rec in gemm_suite.run(be, cases, shapes, settings, rtol, with_cublas=not no_cublas, seed=seed,
                                      env=env):
                sink.append(rec)
                records.append(rec)
                status.update(f"[{len(records)}/{total}] {rec['variant']} {rec['shape']}: {rec['status']}")
    finally:
        sink.close()

    mode = "cold L2" if cold else "hot L2"
    clock = "CUDA events" if be.name == "cuda" else "perf_counter"
    out.print(tables.gemm_table(records, f"GEMM ladder · median of ≥10 samples ({clock}), {mode}, budget "
                                          f"{budget:g} s/case · rtol {rtol:g}"))
    if be.name == "cuda" and not no_cublas and not any(r["variant"] == "cublas" for r in records):
        out.print(f"cuBLAS: not available ({gemm_suite.Cublas(be).reason})")
    elif be.name != "cuda":
        out.print("cuBLAS: not available (CPU backend)")
    for r in records:
        if r.get("status") in results.FAILED:
            why = r.get("error") or f"rel_err {r.get('rel_err'):.2e} > rtol {rtol:g}"
            out.print(f"[red]{r['status']}[/] {r['variant']} {r['params']} {r['shape']}: {why}")
    out.print(f"CSV: {path}")
    if any(r.get("status") in results.FAILED for r in records):
        sys.exit(1)


# -- sweep ----------------------------------------------------------------------------------------
class _SweepView:
    """Renders a sweep's events: a progress bar with ETA on stderr, one line per worker restart."""

    def __init__(self) -> None:
        self.progress = None
        self.task = None
        self.failed = 0

    def __call__(self, kind: str, **data) -> None:
        if kind == "compiled":
            err.print(_compile_line(data["stats"]))
        elif kind == "start":
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            if data["resumed"]:
                err.print(f"resuming {data['path']}: {data['resumed']} cases already done")
            self.progress = Progress(TextColumn("[bold]sweep"), BarColumn(), MofNCompleteColumn(),
                                     TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                                     TextColumn("{task.description}"), console=err, transient=False)
            self.progress.start()
            self.task = self.progress.add_task("", total=data["total"])
        elif kind == "job" and self.progress:
            self.progress.update(self.task, description=data["label"])
        elif kind == "record" and self.progress:
            rec = data["rec"]
            if rec is not None and rec["status"] in results.FAILED:
                self.failed += 1
                why = rec.get("error") or f"rel_err {rec['rel_err']:.2e}"
                self.progress.console.print(f"[red]{rec['status']}[/] {rec['variant']} {rec['params']} "
                                            f"{rec['shape']}: {why}")
            self.progress.advance(self.task)
        elif kind == "worker" and data["restart"] and self.progress:
            self.progress.console.print(f"[yellow]started a fresh worker (pid {data['pid']})[/]")

    def stop(self) -> None:
        if self.progress:
            self.progress.stop()


def _compile_line(st) -> str:
    if not st.kernels:
        return "compile: nothing to compile"
    line = (f"compile: {st.kernels} kernels for {st.arch} · {st.compiled} compiled, {st.cached} cached, "
            f"{st.failed} failed{f', {st.skipped} beyond the device limits' if st.skipped else ''} · "
            f"{st.wall_s:.1f} s wall on {st.jobs} jobs")
    if st.compiled:
        line += (f" · nvcc CPU {st.nvcc_cpu_s:.1f} s ({st.cpu_per_core_s:.1f} s per job) · "
                 f"wall/ideal {st.wall_vs_ideal:.2f}")
    if st.load_s is not None:
        line += f" · loaded into the GPU context in {st.load_s:.2f} s"
    return line


def _run_sweep(spec, backend: str, out_path, fresh: bool, jobs, load_only: bool = False):
    from nnbench import sweep as sweep_mod
    view = _SweepView()
    try:
        outcome = sweep_mod.execute(spec, backend, out_path, fresh, jobs, load_only=load_only, events=view)
    finally:
        view.stop()
    return outcome


@cli.command()
@click.argument("config_path", metavar="CONFIG.yaml", type=click.Path(dir_okay=False))
@click.option("--out", "out_path", type=click.Path(dir_okay=False),
              help="Result CSV (default: resume the newest results/<sweep>-<gpu>-*.csv, or start a new one).")
@click.option("--fresh", is_flag=True, help="Start a new result file instead of resuming.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), help="Parallel nvcc processes (default: one per core).")
@click.option("--watchdog", type=click.FloatRange(min=0.0, min_open=True),
              help="Seconds without progress before a case counts as hung (overrides timing.watchdog).")
@click.option("--dry-run", is_flag=True, help="Print the expanded plan and stop; needs no GPU.")
@click.option("--compile-only", is_flag=True,
              help="Compile (and, with a GPU, load) every kernel of the sweep, report the times, and stop.")
@click.option("--arch", help="With --compile-only and no GPU: the target, e.g. sm_90.")
@backend_option
def sweep(config_path, out_path, fresh, jobs, watchdog, dry_run, compile_only, arch, backend) -> None:
    """Sweep a YAML config: every point of its axes, at every shape; resumable.

    \b
    Examples:
      nnbench sweep configs/gemm_sweep.yaml
      nnbench sweep configs/gemm_sweep.yaml --dry-run
      nnbench sweep configs/gemm_sweep.yaml --compile-only --arch sm_90
    """
    from dataclasses import replace

    from nnbench import config
    if out_path and fresh and Path(out_path).exists():
        raise NnbenchError(f"--out {out_path}: the file exists and --fresh would overwrite it; name a new file")
    spec = config.load_sweep(config_path)
    if watchdog:
        spec = replace(spec, watchdog_s=watchdog)
    if arch and not compile_only:
        raise NnbenchError("--arch applies only with --compile-only (a run compiles for the GPU it runs on)")
    if arch and not re.fullmatch(r"sm_\d{2,3}", arch):
        raise NnbenchError(f"--arch {arch}: expected sm_<major><minor>, e.g. sm_80 or sm_90")
    n_shapes = len(spec.shapes)
    out.print(f"sweep {spec.name} ({spec.path}) · {n_shapes} shapes · baseline {_case_label(spec.baseline)}")
    out.print(tables.plan_table(spec.counts, n_shapes, "plan: the axes' product, less what restrictions and the "
                                                       "variants' rules exclude"))
    if dry_run:
        return
    if compile_only:
        if arch:
            from nnbench import sweep as sweep_mod
            out.print(_compile_line(sweep_mod.compile_only(spec, arch, jobs)))
        else:
            outcome = _run_sweep(spec, backend, None, True, jobs, load_only=True)
            out.print(_compile_line(outcome.compile))
        return
    outcome = _run_sweep(spec, backend, out_path, fresh, jobs)
    _print_outcome(spec, outcome)
    if outcome.failed:
        sys.exit(1)


def _case_label(case) -> str:
    return f"{case.variant.name} {case.param_label}".strip() if case else "none"


def _print_outcome(spec, outcome) -> None:
    clock = "CUDA events" if outcome.backend == "cuda" else "perf_counter"
    title = (f"sweep {spec.name} · best parameters per shape · median of ≥{spec.settings.min_samples} samples "
             f"({clock}), {'cold' if spec.settings.cold else 'hot'} cache")
    out.print(tables.sweep_table(outcome.summary.rows(), spec.baseline.variant.name if spec.baseline else None,
                                 title))
    line = f"ran {outcome.jobs} cases in {outcome.run_s:.1f} s ({outcome.wall_s:.1f} s with start-up and compilation)"
    if outcome.resumed:
        line += f" ({outcome.resumed} resumed from the file)"
    if outcome.skipped:
        line += f" · {outcome.skipped} skipped for this device"
    if outcome.failed:
        line += f" · {outcome.failed} failed"
    if outcome.restarts:
        line += f" · {outcome.restarts} worker restarts"
    if outcome.overhead is not None:
        line += (f" · kernel time {outcome.gpu_s:.1f} s · overhead outside kernels {100 * outcome.overhead:.1f}% "
                 f"of the run ({100 * outcome.overhead_total:.1f}% of the whole)")
    out.print(line)
    out.print(f"CSV: {outcome.path}")


# -- check ----------------------------------------------------------------------------------------
class Tolerance(click.ParamType):
    name = "TOLERANCE"

    def convert(self, value, param, ctx):
        if isinstance(value, float):
            return value
        text = str(value).strip()
        try:
            v = float(text[:-1]) / 100 if text.endswith("%") else float(text)
        except ValueError:
            self.fail(f"{value!r}: expected a fraction or a percentage, e.g. 0.05 or 5%", param, ctx)
        if not 0 <= v < 10:
            self.fail(f"{value!r}: expected 0% to 1000%", param, ctx)
        return v


@cli.command()
@click.argument("files", nargs=-1, metavar="[BASELINE.csv CURRENT.csv]", type=click.Path(dir_okay=False))
@click.option("--tolerance", type=Tolerance(), default="5%", show_default=True,
              help="A slowdown smaller than this is SAME (e.g. 5% or 0.05).")
@click.option("--run", "run_config", type=click.Path(dir_okay=False),
              help="Run this sweep config now (fresh) and check it against --baseline.")
@click.option("--baseline", "baseline_path", type=click.Path(dir_okay=False),
              help="With --run: the baseline CSV (default: results/baselines/<gpu>.csv).")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), help="With --run: where the new CSV goes.")
@click.option("--all", "show_all", is_flag=True, help="List SAME cases too.")
@click.option("--any-gpu", is_flag=True, help="Compare even when the two files come from different GPUs.")
@backend_option
def check(files, tolerance, run_config, baseline_path, out_path, show_all, any_gpu, backend) -> None:
    """Compare a result CSV against a baseline: FASTER, SAME, SLOWER, MISSING or NEW per case.

    Exits 1 on any SLOWER case or any failed verification.

    \b
    Examples:
      nnbench check results/baselines/nvidia-h100-80gb-hbm3.csv results/ci-….csv --tolerance 5%
      nnbench check --run configs/ci.yaml --baseline results/baselines/nvidia-h100-80gb-hbm3.csv
    """
    from nnbench import config, paths, verdict
    if run_config:
        if files:
            raise NnbenchError("give either BASELINE.csv CURRENT.csv or --run CONFIG.yaml, not both")
        if baseline_path and not Path(baseline_path).is_file():
            raise NnbenchError(f"--baseline {baseline_path}: no such file")
        spec = config.load_sweep(run_config)
        outcome = _run_sweep(spec, backend, out_path, True, None)
        _print_outcome(spec, outcome)
        current = outcome.path
        if not baseline_path:
            gpu = verdict.gpus(verdict.load(current))
            name = results.slug(next(iter(gpu))) if gpu else "cpu"
            baseline_path = paths.RESULTS / "baselines" / f"{name}.csv"
            if not baseline_path.is_file():
                raise NnbenchError(f"no baseline for this GPU at {baseline_path}; make one with: nnbench sweep "
                                   f"{run_config} --fresh --out {baseline_path}")
    else:
        if len(files) != 2:
            raise NnbenchError("check needs BASELINE.csv and CURRENT.csv, or --run CONFIG.yaml")
        if baseline_path or out_path:
            raise NnbenchError("--baseline and --out apply only with --run")
        baseline_path, current = files
    base, cur = verdict.load(Path(baseline_path)), verdict.load(Path(current))
    gb, gc = verdict.gpus(base), verdict.gpus(cur)
    if gb and gc and gb != gc and not any_gpu:
        raise NnbenchError(f"the baseline comes from {', '.join(sorted(gb))} and the current run from "
                           f"{', '.join(sorted(gc))}; compare like with like, or pass --any-gpu")
    verdicts = verdict.compare(base, cur, tolerance)
    counts = {name: sum(v.verdict == name for v in verdicts) for name in verdict.VERDICTS}
    title = (f"check {current} against {baseline_path} · tolerance {100 * tolerance:g}% or the combined IQR, "
             "whichever is larger")
    out.print(tables.verdict_table(verdicts, title, show_same=show_all))
    out.print(" · ".join(f"{n} {name}" for name, n in counts.items() if n) or "no cases")
    if verdict.gated(verdicts):
        out.print("[bold red]regression gate: FAILED[/] (a case is SLOWER or failed verification)")
        sys.exit(1)
    out.print("[green]regression gate: passed[/]")


# -- train ----------------------------------------------------------------------------------------
def _layers_option(text: str) -> tuple[int, ...]:
    try:
        layers = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise NnbenchError(f"--layers {text}: expected comma-separated widths, input first, e.g. 120,300,7") from None
    if len(layers) < 2 or min(layers) < 1:
        raise NnbenchError(f"--layers {text}: needs at least an input and an output layer, every width >= 1")
    return layers


@cli.command()
@click.option("--net", help="One of the seed's Nets 1-8 (configs/nets.yaml).")
@click.option("--layers", "layers_text", metavar="W0,W1,...", help="Any other layer list, input first: 120,300,7.")
@click.option("--version", "-V", "version_names", multiple=True, metavar="NAME",
              help="Version to train (repeatable, or `all`). Default: the fastest GPU version (fused; kcm-mass "
                   "where a net does not fit on chip; batched with --batch), or "
                   "sequential (batched-numpy) without a GPU. Choices: "
                   + ", ".join(v.name for v in registry.suite_variants("mlp")))
@click.option("--batch", type=click.IntRange(min=1), default=1, show_default=True,
              help="Samples per step. 1 trains per sample, as the seed; B > 1 runs the mini-batch versions "
                   "(batched, batched-cublas, batched-numpy) for a fixed number of --epochs.")
@click.option("--epochs", type=click.IntRange(min=1), default=None,
              help="With --batch: epochs over the noisy training set (default 10).")
@click.option("--train-samples", type=click.IntRange(min=1), default=None,
              help="With --batch: noisy training letters (default 65,536).")
@click.option("--gpus", "--ranks", "ranks", type=click.IntRange(min=1), default=None,
              help="With --batch: data-parallel over N MPI ranks, one per GPU (on the CPU backend, N processes). "
                   "nnbench starts mpirun itself, or runs as the ranks of an mpirun/srun it was started under.")
@click.option("--allreduce", "allreduce", type=click.Choice(["nccl", "mpi"]), default=None,
              help="Gradient exchange with --gpus: nccl (device-side, the default) or mpi (the seed's: through "
                   "the host). The CPU backend always uses mpi.")
@click.option("--encoding", type=int, help="Input encoding in bits: 60 (6x10) or 120 (10x12); must match the "
                                          "net's input width (default: that width).")
@click.option("--rate", type=float, default=None,
              help="Learning rate (default: the net's setting, else 0.3; with --batch, the net's batch_rate, else 1, "
                   "on the batch's mean error).")
@click.option("--momentum", type=float, default=None, help="Momentum in [0, 1) (default: the net's setting, else 0.8).")
@click.option("--tolerance", type=float, default=None, help="Stop when an epoch's mean error 1/2 sum (t-o)^2 is at "
                                                           "most this (default 1e-5, as in the seed).")
@click.option("--max-iterations", type=int, default=None,
              help="Stop after this many samples (default: the net's setting, else 200,000).")
@click.option("--seed", type=int, default=0, show_default=True, help="Initial weights and noisy test letters.")
@click.option("--init", "init_kind", default=None, metavar="KIND",
              help="Initial weights: glorot (uniform in ±scale*sqrt(6/(fan_in+fan_out))) or centered (std "
                   "scale/sqrt(fan_in), biases that centre each pre-activation; trains the deep Nets 7 and 8). "
                   "Default: the net's setting in configs/nets.yaml, else glorot.")
@click.option("--init-scale", type=float, default=None,
              help="The scale of --init (default: the net's setting, else 4, Glorot's advice for sigmoid units).")
@click.option("--blocks", type=click.IntRange(min=1), default=None,
              help="Grid of fused and fused-barrier (default: one block per SM, at most the widest layer's rows).")
@click.option("--test-per-letter", type=click.IntRange(min=1), default=10, show_default=True,
              help="Held-out noisy copies of each letter in the test set.")
@click.option("--compare", "compare", type=click.Choice(["torch"]), help="Add PyTorch eager and CUDA-graph rows.")
@click.option("--torch-iterations", type=click.IntRange(min=10), default=2000, show_default=True,
              help="Iterations of each per-sample PyTorch row (its time per iteration is what is compared).")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False),
              help="CSV path (default results/train-<gpu>-<time>.csv).")
@click.option("--letters/--no-letters", default=True, help="Print expected against received bits per letter.")
@backend_option
def train(net, layers_text, version_names, batch, epochs, train_samples, ranks, allreduce, encoding, rate, momentum,
          tolerance, max_iterations, seed, init_kind, init_scale, blocks, test_per_letter, compare, torch_iterations,
          csv_path, letters, backend) -> None:
    """Train the seed's character-recognition MLP, per sample or in mini-batches, verify each version,
    and compare.

    \b
    Examples:
      nnbench train --net 8                    # the fastest GPU version, to convergence
      nnbench train --net 1 -V all --compare torch
      nnbench train --layers 120,300,7 -V mass --max-iterations 5000
      nnbench train --net 8 --batch 4096 -V batched -V batched-cublas --compare torch
      nnbench train --net 8 --batch 16384 --gpus 4 --allreduce nccl
    """
    from nnbench import nets as nets_mod
    from nnbench.suites import batched as batched_mod
    from nnbench.suites import mlp
    if net and layers_text:
        raise NnbenchError("--net and --layers are exclusive: use one of them")
    if layers_text:
        layers, label, tuned = _layers_option(layers_text), "custom", {}
    else:
        known = nets_mod.load()
        name = str(net or 8)
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
        if n not in [v.name for v in registry.suite_variants("mlp")]:
            raise NnbenchError(f"--version {n}: unknown; choose from all, "
                               + ", ".join(v.name for v in registry.suite_variants("mlp")))
        if n not in [v.name for v in pool]:
            raise NnbenchError(f"--version {n}: trains one sample at a time; with --batch {batch} choose from "
                               + ", ".join(batched_names) if mini else
                               f"--version {n}: a mini-batch version; give --batch B > 1 with it")
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
    world = _data_parallel(ranks, allreduce, mini, batch, backend)
    be = _open(backend, world.local_rank if world else 0)
    if world is not None:
        _rank_consoles(world.rank)
    if not names:
        names = [batched_mod.default_version(be) if mini else mlp.default_version(be, layers)]
        if be.name != "cuda":
            err.print(f"[yellow]nnbench: no GPU: training the {names[0]} (NumPy) version[/]")
    chosen = mlp.plan(names, be.name, pool)
    env = results.environment(be)
    out.print(_device_line(env))
    head = (f"{label}: layers {'-'.join(map(str, layers))} · {sum(layers)} neurons · "
            f"{nets_mod.Net(label, layers).feedforward_macs:,} multiply-adds per feedforward · init "
            f"{hyper.init} {hyper.init_scale:g} · rate {hyper.rate} · momentum {hyper.momentum}")
    torch_modes = ("eager", "graph") if compare == "torch" and be.name == "cuda" else ()
    path = csv_path or results.default_path("train", env["gpu"])
    if mini:
        out.print(f"{head} · batch {batch} · {epochs} epochs of {train_samples:,} noisy letters")
        if world is not None:
            out.print(f"data-parallel over {world.size} ranks ({batch // world.size} samples each per step), "
                      f"gradients through {(allreduce or 'nccl') if be.name == 'cuda' else 'mpi'}")
        sink = (results.CsvSink(path, fields=results.BATCH_FIELDS) if world is None or world.rank == 0
                else results.NullSink())
        total = epochs * (train_samples // batch)
        records = _stream(sink, total, "step", lambda progress: batched_mod.run(
            be, chosen, layers, hyper, batch, epochs, train_samples, test_per_letter, torch_modes=torch_modes,
            progress=progress, env=env, world=world, exchange_kind=allreduce or "nccl"), label)
        clock = ("median step time, CUDA events, steady state (PyTorch: events around whole epochs)"
                 if be.name == "cuda" else "host clock")
        out.print(tables.batch_table(records, f"{label} · mini-batch training, B = {batch} · {clock}"))
        check_what = f"weights after {batched_mod.CHECK_STEPS} steps"
    else:
        out.print(f"{head} · tolerance {hyper.tolerance:g} · at most {hyper.max_iterations:,} iterations")
        sink = results.CsvSink(path, fields=results.TRAIN_FIELDS)
        records = _stream(sink, hyper.max_iterations, "it", lambda progress: mlp.run(
            be, chosen, layers, hyper, test_per_letter, torch_modes=torch_modes, torch_iterations=torch_iterations,
            progress=progress, env=env, blocks=blocks), label)
        clock = "CUDA events around whole epochs (sequential: host clock)" if be.name == "cuda" else "host clock"
        out.print(tables.train_table(records, f"{label} · per-sample training · time per iteration: {clock}"))
        check_what = f"weights after {mlp.CHECK_ITERATIONS} iterations"
    if compare == "torch" and be.name != "cuda":
        out.print("PyTorch comparison: needs the GPU backend")
    shown = next((r for r in records if r.get("_outcome") is not None and r["_outcome"].test_outputs is not None), None)
    if letters and shown is not None:
        out.print(_letters_view(shown, layers, mlp))
    for r in records:
        if r.get("status") in results.FAILED:
            why = r.get("error") or f"{check_what} differ from the float64 reference by " \
                                    f"{r.get('weights_rel_err'):.2e} > {r.get('weights_rtol'):.2e}"
            out.print(f"[red]{r['status']}[/] {r['version']}: {why}")
    out.print(f"CSV: {path}")
    if any(r.get("status") in results.FAILED for r in records):
        sys.exit(1)


def _rank_consoles(rank: int) -> None:
    """Inside MPI ranks: rank 0 reports for all, the others stay silent; mpirun hands the ranks a
    pseudo-terminal, so rich would otherwise colour and squeeze the table into 80 columns."""
    global out, err
    out = Console(highlight=False, width=180, color_system=None, quiet=rank != 0)
    err = Console(stderr=True, highlight=False, color_system=None, quiet=rank != 0)


def _data_parallel(ranks: int | None, allreduce: str | None, mini: bool, batch: int, backend: str):
    """The MPI world this process is a rank of; or, when --gpus N > 1 asks for ranks that do not
    exist yet, start them (mpirun running this same command) and exit with their status."""
    from nnbench.runtime import exchange
    started = exchange.started_size()
    if (ranks or 1) == 1 and started == 1:
        if allreduce is not None:
            raise NnbenchError(f"--allreduce {allreduce}: applies with --gpus N > 1")
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
    if backend != "cpu":
        from nnbench.runtime import device_count
        have = device_count()
        if have < ranks and backend == "cuda":
            raise NnbenchError(f"--gpus {ranks}: this machine has {have} GPU(s); give at most {have}, or "
                               "--backend cpu for CPU ranks")
    sys.exit(exchange.launch(ranks, ARGV))


PLAIN_PROGRESS_S = 60.0  # without a terminal (a CI log, a file), a progress line this often per version


def _stream(sink, total: int, unit: str, records, label: str) -> list[dict]:
    """Run `records(progress)`, a generator of result rows, with a rich progress bar per version
    (current error in it); each row goes to the CSV the moment it exists. Where stderr is no
    terminal the bar cannot redraw, so a line a minute says how far each version is."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                        TextColumn("{task.completed:,.0f} " + unit), TextColumn("error {task.fields[error]}"),
                        TimeElapsedColumn(), console=err)
    tasks, rows, said, start = {}, [], {}, time.monotonic()

    def on_progress(name, done, e):
        if name not in tasks:
            tasks[name] = progress.add_task(name, total=total, error="—")
        progress.update(tasks[name], completed=done, error=f"{e:.2e}")
        now = time.monotonic()
        if not err.is_terminal and now - said.get(name, -math.inf) >= PLAIN_PROGRESS_S:
            said[name] = now
            err.print(f"{name}: {done:,} of {total:,} {unit}, error {e:.2e}, {now - start:,.0f} s")

    try:
        with progress:
            for rec in records(on_progress):
                rec.update(net=label)
                sink.append(rec)
                rows.append(rec)
    finally:
        sink.close()
    return rows


def _letters_view(rec: dict, layers, mlp) -> str:
    """Expected against received bits for each clean letter, through the trained version."""
    from nnbench import glyphs
    outs = rec["_outcome"].test_outputs
    lines, row = [f"{rec['version']}: expected -> received on held-out noisy letters (first copy of each):"], []
    for i, c in enumerate(glyphs.LETTERS):
        got = outs[i * (rec["test_samples"] // 52)]
        bits = "".join("1" if v >= 0.5 else "0" for v in got)
        want = "".join(str(int(b)) for b in glyphs.target(c))
        mark = "[green]✓[/]" if bits == want else "[red]✗[/]"
        row.append(f"{c} {want}->{bits} {mark}")
        if len(row) == 6:
            lines.append("   ".join(row))
            row = []
    if row:
        lines.append("   ".join(row))
    return "\n".join(lines)
