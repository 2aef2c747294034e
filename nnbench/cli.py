"""The command line: parse options, pick suites, render output. Nothing else lives here.

Every user error (a NnbenchError, or a click usage error) becomes one line on stderr and exit
code 2; a failed verification or a kernel fault exits 1 after the results are written.
"""

from __future__ import annotations

import sys

import click
from rich.console import Console
from rich.table import Table

from nnbench import __version__, measure, registry, results
from nnbench.errors import NnbenchError
from nnbench.runtime import open_backend
from nnbench.suites import gemm as gemm_suite

# Wide when piped (CI logs, pasted output), so the ladder table is never squeezed into 80 columns.
out = Console(highlight=False, width=None if sys.stdout.isatty() else 180)
err = Console(stderr=True, highlight=False)


class NnbenchGroup(click.Group):
    """Runs click without its multi-line usage dumps: any error is one line and exit code 2."""

    def main(self, args=None, prog_name=None, **kw):
        kw["standalone_mode"] = False
        try:
            rc = super().main(args=args, prog_name=prog_name or "nnbench", **kw)
        except click.exceptions.Exit as e:
            sys.exit(e.exit_code)
        except click.exceptions.Abort:
            click.echo("nnbench: aborted", err=True)
            sys.exit(130)
        except click.ClickException as e:
            click.echo(f"nnbench: error: {e.format_message()}", err=True)
            sys.exit(2)
        except NnbenchError as e:
            click.echo(f"nnbench: error: {e}", err=True)
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


def param_options(suite: str):
    """One --name option per kernel parameter in the registry (TS -> --ts, WPT -> --wpt, ...)."""
    def deco(f):
        for p in reversed(registry.all_param_names(suite)):
            f = click.option(p.option, p.name, type=int, default=None, help=f"{p.name}: {p.help}.")(f)
        return f
    return deco


def _open(backend: str):
    be, note = open_backend(backend)
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
    """List GPUs: compute capability, SMs, clocks, memory, theoretical FP32 peak and DRAM bandwidth."""
    from nnbench.errors import BackendUnavailable
    try:
        from nnbench.runtime import cuda
    except BackendUnavailable as e:
        raise NnbenchError(str(e)) from None
    n = cuda.device_count()
    if n == 0:
        raise NnbenchError("no CUDA GPU found on this machine")
    t = Table(title="CUDA devices", title_justify="left", header_style="bold")
    cols = ["#", "name", "CC", "SMs", "SM MHz", "mem MHz", "memory", "L2", "FP32 peak", "DRAM peak"]
    if do_measure:
        cols += ["FMA measured", "copy measured"]
    for c in cols:
        t.add_column(c, justify="left" if c in ("name",) else "right")
    from nnbench.suites.ceilings import measure_ceilings
    for i in range(n):
        d = cuda.device_info(cuda.drv.Device(i))
        row = [str(i), d.name, f"{d.cc[0]}.{d.cc[1]}", str(d.sm_count), f"{d.sm_clock_mhz:.0f}",
               f"{d.mem_clock_mhz:.0f}", f"{d.mem_bytes / 2**30:.1f} GiB", f"{d.l2_bytes / 2**20:.0f} MiB",
               f"{d.fp32_peak_flops / 1e12:.1f} TFLOP/s", f"{d.dram_peak_bytes / 1e9:,.0f} GB/s"]
        if do_measure:
            be = cuda.CudaBackend(i)
            c = measure_ceilings(be)
            be.close()
            row += [f"{c['fma_tflops']:.1f} TFLOP/s ({c['fma_pct_theory']:.0f}%)",
                    f"{c['copy_gbs']:,.0f} GB/s ({c['copy_pct_theory']:.0f}%)"]
        t.add_row(*row)
    out.print(t)
    if do_measure:
        out.print("FMA: 8 independent FMA chains per thread, full occupancy. copy: grid-stride float4 copy of "
                  "1 GiB, counting bytes read + written. % = of the theoretical figure at the maximum clock.")


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
    out.print(results.gemm_table(records, f"GEMM ladder · median of ≥10 samples ({clock}), {mode}, budget "
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
