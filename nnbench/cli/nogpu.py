"""What gemm, conv and train do on the CPU path with GPU-only choices: run the CPU variants, say in
one line what was left out and the command that shows the left-out kernels' resources
(`--compile-only`, which needs no GPU), so no hint leads to another refusal.
"""

from __future__ import annotations

import re

import click
from rich.markup import escape
from rich.table import Table

from nnbench.errors import NnbenchError


def cpu_subset(pool: list, names: list[str], overrides: dict[str, int], command: str, option: str,
               flags: tuple[str, ...] = ()):
    """(the CPU variants' names to run, the overrides they take, the one line or None) of the user's
    choices on the CPU path. `pool`: every variant the command may run; `option`: its variant option;
    `flags`: options given that only a GPU runs (--backward). A GPU variant named, or taking a given
    parameter, is left out and named in the line."""
    cpu = [v for v in pool if v.backend == "cpu"]
    by_name = {v.name: v for v in pool}
    named = [by_name[n] for n in names if n in by_name]
    left = [v for v in named if v.backend != "cpu"]
    if not names:
        left = [v for v in pool if v.backend != "cpu" and any(v.param(k) for k in overrides)]
    kept = [v.name for v in named if v.backend == "cpu"] or [v.name for v in cpu]
    cpu_overrides = {k: x for k, x in overrides.items() if any(by_name[n].param(k) for n in kept)}
    unused = {k: x for k, x in overrides.items() if k not in cpu_overrides}
    if not left and not unused and not flags:
        return kept, cpu_overrides, None
    opts = " ".join(f"--{k.lower()} {x}" for k, x in unused.items())
    what = ", ".join([v.name for v in left] + list(flags)) or opts
    again = " ".join([f"nnbench {command}", *(f"{option} {v.name}" for v in left), opts, *flags, "--compile-only"])
    from nnbench.runtime.device import NO_GPU_ARCH
    line = (f"nnbench: not run here: {what} need{'s' if len(left) + len(flags) == 1 else ''} a GPU; running "
            f"{', '.join(kept)} on the CPU; `{' '.join(again.split())}` shows the kernels' registers, shared "
            f"memory and spills for {NO_GPU_ARCH}")
    return kept, cpu_overrides, line


def compile_only_options(f):
    f = click.option("--arch", default=None, metavar="sm_XY",
                     help="With --compile-only: the architecture (default: this GPU's, else sm_90).")(f)
    return click.option("--compile-only", is_flag=True,
                        help="Compile the chosen GPU kernels and show their registers, shared memory, spills and "
                             "occupancy for --arch; runs nothing, needs no GPU.")(f)


def check_arch(arch: str | None, compile_only: bool = True) -> None:
    if arch is None:
        return
    if not compile_only:
        raise NnbenchError("--arch applies only with --compile-only (a run compiles for the GPU it runs on)")
    if not re.fullmatch(r"sm_\d{2,3}a?", arch):
        raise NnbenchError(f"--arch {arch}: expected sm_XY, for example sm_90")


def show_resources(workload_name: str, chosen: list[tuple], arch: str | None, backend: str) -> None:
    """Compile each (variant, params) of `workload_name` for `arch` (else this GPU's, else sm_90) and print one
    table of ptxas's resources and the occupancy they allow: `profile`'s first section, for many cases."""
    from nnbench.cli import app
    from nnbench.profiling.profile import compiled_for, resources
    from nnbench.runtime.device import NO_GPU_ARCH, for_arch
    from nnbench.workloads import workload
    from nnbench.workloads.base import Case
    device = None
    if arch is None and backend != "cpu":
        from nnbench.backend_choice import open_requested
        be, line = open_requested(app.request_of(backend), app.DEVICE[0])  # an explicit cuda refuses here
        if be.runs_kernels:
            say(line)
            device, arch = be.device, be.arch
    if arch is None:
        arch = NO_GPU_ARCH
        app.err.print(f"nnbench: no GPU: compiling for {arch} (--arch picks another)")
    gpu = [(v, p) for v, p in chosen if v.source]
    if not gpu:
        app.out.print("compile: nothing to compile (the chosen variants run on the host)")
        return
    work = workload(workload_name)
    limits = device or for_arch(arch)
    t = Table(title=f"{workload_name} · resources on {limits.name} ({arch}) · ptxas", title_justify="left",
              header_style="bold", pad_edge=False)
    for name in ("variant", "params", "kernel", "threads", "registers", "static smem", "spill bytes", "blocks/SM",
                 "occupancy", "limited by"):
        t.add_column(name, justify="left" if name in ("variant", "params", "kernel", "limited by") else "right")
    for v, params in gpu:
        label = " ".join(f"{k}={x}" for k, x in params.items())
        for k in resources(v, params, compiled_for(work, Case(v, tuple(params.items())), arch), limits):
            t.add_row(v.name, label, k.kernel, str(k.threads), str(k.registers), f"{k.smem_bytes:,}",
                      str(k.spill_bytes), str(k.blocks_per_sm), f"{100 * k.occupancy:.0f}%", k.limiter)
    app.out.print(t)


def say(line: str | None) -> None:
    from nnbench.cli import app
    if line:
        app.err.print(f"[yellow]{escape(line)}[/]", soft_wrap=True)
