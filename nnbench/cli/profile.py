"""`nnbench profile`: one kernel's resources, instruction mix, roofline position and ncu metrics."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import click

from nnbench import results, workloads
from nnbench.cli import app
from nnbench.cli.app import backend_option, device_line, every_param_option, open_device
from nnbench.errors import NnbenchError
from nnbench.report import tables


# -- profile --------------------------------------------------------------------------------------
@app.cli.command()
@click.argument("work_name", metavar="WORKLOAD")
@click.option("--variant", "-v", "variant", required=True, metavar="NAME", help="The variant (ladder step, version).")
# every workload's parameters; the profiled variant says which apply
@every_param_option
@click.option("--m", "m", type=click.IntRange(min=1), default=4096, show_default=True, help="GEMM rows of A and C.")
@click.option("--n", "n", type=click.IntRange(min=1), default=4096, show_default=True, help="GEMM columns of B and C.")
@click.option("--k", "k", type=click.IntRange(min=1), default=4096, show_default=True, help="GEMM inner size.")
@click.option("--net", default="8", show_default=True, help="MLP: the net (configs/nets.yaml) the version trains.")
@click.option("--batch", type=click.IntRange(min=1), default=1, show_default=True,
              help="MLP: samples per step (the mini-batch versions).")
@click.option("--layer", default=None, metavar="N,C,H,W,K,R[,S,P]",
              help="Conv: the layer (default: configs/conv.yaml's first resnet layer).")
@click.option("--model", type=click.Choice(["lenet5"]), default=None, help="Conv: a whole model's step instead.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="A sweep config to take the variant (and, with the parameter options, the case) and the problem "
                   "from: any workload's, and the only way for a user's kernel (workload kernel).")
@click.option("--problem", "problem_index", type=click.IntRange(min=0), default=0, show_default=True,
              help="With --config: which of its problems, in the config's order.")
@click.option("--ncu", "with_ncu", is_flag=True, help="Also run Nsight Compute on one launch of the kernel.")
@click.option("--split", type=click.Choice(list(workloads.every_split())), default=None,
              help="Also split the case's timed unit into its parts, on a GPU: "
                   + "; ".join(f"{kind} ({', '.join(names)}): {what}"
                               for kind, (what, names) in workloads.every_split().items()) + ".")
@click.option("--ncu-csv", "ncu_csv", type=click.Path(dir_okay=False), default=None,
              help="With --ncu: also keep ncu's raw CSV in this file (a new file).")
@click.option("--kernel", default=None, metavar="NAME",
              help="The kernel --ncu profiles (default: the variant's main one, e.g. gemm, forward, fused_train).")
@click.option("--arch", default=None, metavar="sm_XY",
              help="Without a GPU: the architecture to compile for and take limits from (default sm_90).")
@app.json_option
@click.option("--launch-only", is_flag=True, hidden=True, help="Launch the kernel only (what --ncu profiles).")
@backend_option
def profile(work_name, variant, m, n, k, net, batch, layer, model, config_path, problem_index, with_ncu, split,
            ncu_csv, kernel, arch, launch_only, backend,
            **params) -> None:
    """Profile one kernel: resources and occupancy, the hot loop's instruction mix from the SASS, and
    (GEMM, on a GPU) its achieved FLOP/s and bytes/s on the roofline; --ncu adds Nsight Compute.

    \b
    Examples:
      nnbench profile gemm --variant tiled --ts 32
      nnbench profile gemm -v coarsened --ts 32 --wpt 8 --ncu
      nnbench profile train -v fused --net 8 --ncu
      nnbench profile train -v batched --net 8 --batch 4096
      nnbench profile train -v batched --net 8 --batch 4096 --backend cpu --arch sm_90
      nnbench profile train -v fused --net 8 --split phases
      nnbench profile conv -v tiled --layer 32,64,56,56,64,3,1,1
      nnbench profile conv -v lenet5 --model lenet5
      nnbench profile conv -v lenet5-implicit --model lenet5 --batch 256 --split stages
      nnbench profile kernel -v tiled --ts 16 --config examples/tiled_gemm/tiled_gemm.yaml --problem 1
    """
    from nnbench.profiling import profile as profiler
    overrides = {name.upper(): v for name, v in params.items() if v is not None}
    case = None
    ctx = click.get_current_context()
    given = {name for name in ctx.params if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE}
    if config_path is None and "problem_index" in given:
        raise NnbenchError("--problem: goes with --config (which of the config's problems)")
    _refuse_other_problems(profiler.ALIASES.get(work_name, work_name), given, config_path, model)
    if config_path is not None:
        found, case, problem = profiler.from_config(config_path, variant, overrides, problem_index)
        if profiler.ALIASES.get(work_name, work_name) != found:
            raise NnbenchError(f"profile {work_name}: {config_path} runs workload {found}; give `profile {found}`")
    elif profiler.ALIASES.get(work_name, work_name) == "kernel":
        raise NnbenchError("profile kernel: a user's kernel is profiled from its config: give --config FILE.yaml")
    else:
        profiler.variant_params(work_name, variant, overrides)  # bad input before the GPU is opened
        problem = _problem(profiler.ALIASES.get(work_name, work_name), m, n, k, net, batch, layer, model)
    if split is not None:  # a split the variant has not, before the GPU is opened
        profiler.check_split(work_name, split, variant, overrides, problem, case)
    if arch is not None and not re.fullmatch(r"sm_\d{2,3}a?", arch):
        raise NnbenchError(f"--arch {arch}: expected sm_XY, for example sm_90")
    if ncu_csv is not None and not with_ncu:
        raise NnbenchError("--ncu-csv: keeps ncu's output, so it needs --ncu")
    if app.JSON[0] is not None and not launch_only:
        app.refuse_taken(app.JSON[0])  # before minutes of compiling and ncu, not after
    be = open_device(backend)
    if launch_only:
        profiler.launch_only(be, work_name, variant, overrides, problem, case)
        return
    if with_ncu and not be.runs_kernels:
        raise NnbenchError("--ncu: needs the cuda backend (a GPU)")
    if split is not None:
        profiler.check_split(work_name, split, variant, overrides, problem, case, be)
    child = [sys.executable, "-m", "nnbench", *app.ARGV, "--launch-only"]
    prof = profiler.profile(be, work_name, variant, overrides, problem, arch, with_ncu, child, kernel=kernel, case=case,
                            split=split)
    env = results.environment(be)
    app.out.print(device_line(env))
    for t in tables.profile_tables(prof):
        app.out.print(t)
    if ncu_csv is not None and prof.ncu_csv is not None:
        from nnbench import safeio
        path, fd = safeio.open_locked(Path(ncu_csv))
        with os.fdopen(fd, "w") as f:
            f.write(prof.ncu_csv)
        app.out.print(f"ncu's raw CSV: {path}")
    if app.JSON[0] is not None:
        from nnbench import rawresults
        app.out.print(f"JSON: {rawresults.write_document(app.JSON[0], 'profile', [profiler.as_json(prof, env)])}")
    if not be.runs_kernels:
        app.out.print("no GPU: resources and instruction mix only; achieved figures, the roofline and --ncu need one")
    if prof.split is not None and prof.split.status != "PASS":
        sys.exit(1)  # a failed verification: exit 1 after the results are written



# The options that make each workload's problem (_problem); another workload's, given, would be silently ignored
PROBLEM_OPTIONS = {"gemm": ("m", "n", "k"), "train": ("net", "batch"), "conv": ("layer", "model", "batch")}


def _refuse_other_problems(work_name: str, given: set[str], config_path, model) -> None:
    """One line for a problem option that this profile would not read: another workload's (`profile gemm --net 3`),
    any with --config (the config's problems are the problems), conv's --batch without --model (a layer has its N)."""
    if config_path is not None:
        reads, where = (), f"the problems come from --config {config_path} (pick one with --problem N)"
    else:
        reads = PROBLEM_OPTIONS.get(work_name, ())
        where = f"profile {work_name} reads " + (", ".join(f"--{o}" for o in reads) or "none of them")
    for name in sorted(given & {o for opts in PROBLEM_OPTIONS.values() for o in opts}):
        if name not in reads:
            raise NnbenchError(f"--{name}: not an option of this profile; {where}")
    if work_name == "conv" and config_path is None and "batch" in given and model is None:
        raise NnbenchError("--batch: goes with --model (a whole model's step); a --layer gives its own N")


def _problem(work_name: str, m: int, n: int, k: int, net: str, batch: int, layer: str | None, model: str | None):
    """The one problem a profile runs on, from the options its workload reads."""
    if work_name == "gemm":
        from nnbench.workloads.gemm.session import Shape
        return Shape(m, n, k)
    if work_name == "train":
        from nnbench.workloads.train.session import problem_for
        return problem_for(net, batch=batch, max_iterations=MLP_ITERATIONS, epochs=1,
                           train_samples=batch * MLP_STEPS)
    from nnbench.workloads.conv import problem as conv_problem
    from nnbench.workloads.conv import session as conv_session
    if model is not None:
        return conv_session.LeNetProblem(batch if batch > 1 else 64)
    if layer is None:
        return conv_problem.load_sets()["resnet"][0]
    try:
        dims = [int(x) for x in layer.split(",")]
        shape = conv_problem.ConvShape(*dims)
    except (ValueError, TypeError):
        raise NnbenchError(f"--layer {layer}: expected N,C,H,W,K,R with optional ,stride,pad") from None
    shape.validate()
    return shape


MLP_ITERATIONS = 1040  # a trainer's profile: 20 epochs of the 52 letters per sample ...
MLP_STEPS = 20  # ... or 20 mini-batch steps
