"""`nnbench gemm`: the GEMM ladder, verified and timed beside cuBLAS."""

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
    param_options,
    timing_options,
)
from nnbench.errors import NnbenchError
from nnbench.report import tables
from nnbench.runtime.vendor import Cublas
from nnbench.workloads.gemm import session as gemm_session


# -- gemm -----------------------------------------------------------------------------------------
@app.cli.command()
@click.option("--variant", "-v", "variants", multiple=True, metavar="NAME",
              help="Ladder step to run (repeatable; default: all steps for the backend). "
                   f"Choices: {', '.join(v.name for v in workloads.variants_of('gemm'))}.")
@param_options("gemm")
@click.option("--m", "m", type=click.IntRange(min=1), help="Rows of A and C.")
@click.option("--n", "n", type=click.IntRange(min=1), help="Columns of B and C.")
@click.option("--k", "k", type=click.IntRange(min=1), help="Columns of A, rows of B.")
@click.option("--size", "sizes", type=click.IntRange(min=1), multiple=True,
              help="Square size M=N=K (repeatable). Default 4096 on cuda, 1024 on cpu.")
@timing_options
@app.sanitize_option
@click.option("--rtol", type=options.POSITIVE, default=None,
              help="Largest error ratio max |C-ref| / (|alpha||A||B| + |beta||C0|) that passes "
                   "(default: each row's limit from its precision and K, docs/VERIFICATION.md).")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False),
              help="Write the CSV here, a new file (default: results/gemm-<gpu>-<time>.csv).")
@force_option
@json_option
@click.option("--no-cublas", is_flag=True, help="Skip the cuBLAS baseline.")
@autotune_option
@click.option("--seed", type=options.SEED,
              help="Seed for the random inputs (default: fresh entropy, recorded in the CSV).")
@nogpu.compile_only_options
@backend_option
def gemm(variants, m, n, k, sizes, budget, cold, rtol, csv_path, force, no_cublas, no_autotune, seed, compile_only,
         arch, backend,
         **params) -> None:
    """Run the GEMM ladder (column-major SGEMM, C = alpha*A*B + beta*C): verify, time, compare.

    \b
    Examples:
      nnbench gemm                          # every step at 4096^3, with cuBLAS
      nnbench gemm --ts 32 --wpt 8          # steps 2 and 3 take TS and WPT
      nnbench gemm -v warptile --bk 8 --m 1000 --n 777 --k 1234
      nnbench gemm --ts 32 --wpt 8 --compile-only   # registers, shared memory, spills; no GPU needed
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
    nogpu.check_arch(arch, compile_only)
    if backend == "cuda" or compile_only:
        cases = gemm_session.plan(list(variants), overrides, None, "cuda")
        if compile_only:
            nogpu.show_resources("gemm", [(c.variant, c.param_dict) for c in cases], arch, backend)
            return
    on_host = {v.name for v in workloads.variants_of("gemm", "cpu")}
    gpu_named = [name for name in variants if name not in on_host]
    if overrides or gpu_named:  # a bad name or value is refused as on a GPU, before the CPU path leaves it out
        gemm_session.plan(gpu_named, overrides, None, "cuda")
    shapes = [gemm_session.Shape(m, n, k)] if m else [gemm_session.Shape(s, s, s) for s in sizes]
    for s in shapes:
        gemm_session.validate_shape(s)
    be = open_device(backend)
    if not be.runs_kernels:
        variants, overrides, line = nogpu.cpu_subset(workloads.variants_of("gemm"), list(variants), overrides,
                                                     "gemm", "-v")
        nogpu.say(line)
    cases = gemm_session.plan(list(variants), overrides, be.device, be.name)
    shapes = shapes or [gemm_session.Shape(s, s, s) for s in ([4096] if be.runs_kernels else [1024])]

    for s in shapes:
        memory.require(be, *gemm_session.footprint(s), f"shape {s.label}")
    env = results.environment(be)
    sink = app.open_sink(csv_path, "gemm", env["gpu"], force)
    path = sink.path
    settings = app.settings(budget, cold)
    app.out.print(device_line(env))
    total = len(shapes) * (len(cases) + (0 if no_cublas or not be.has_vendor_libs else 1))
    records = app.stream(sink, harness.run(gemm_session.WORKLOAD, be, cases, shapes, settings, rtol,
                                                             seed=seed, env=env, vendor=not no_cublas,
                                                             tuner=app.tuner(be, no_autotune, overrides)), total)

    mode = "cold L2" if cold else "hot L2"
    clock = be.clock_name
    app.out.print(tables.gemm_table(records, f"GEMM ladder · median of ≥10 samples ({clock}), {mode}, budget "
                                          f"{budget:g} s/case · "
                                          f"{f'rtol {rtol:g}' if rtol else 'limit by precision and K'}"))
    if be.has_vendor_libs and not no_cublas and not any(r["variant"] == "cublas" for r in records):
        app.out.print(f"cuBLAS: not available ({Cublas(be).reason})")
    elif not be.has_vendor_libs:
        app.out.print(f"cuBLAS: not available ({be.name} backend)")
    for r in records:
        if r.get("status") in results.FAILED:
            why = r.get("error") or f"error ratio {r.get('rel_err'):.2e} > limit {r.get('rtol'):.2e}"
            app.out.print(f"[red]{r['status']}[/] {r['variant']} {r['params']} {r['shape']}: {why}")
    app.print_csv(path)
    if any(r.get("status") in results.FAILED for r in records):
        sys.exit(1)

