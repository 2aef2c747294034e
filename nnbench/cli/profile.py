"""`nnbench profile`: one kernel's resources, instruction mix, roofline position and ncu metrics."""

from __future__ import annotations

import re
import sys

import click

from nnbench import results, tables
from nnbench.cli import app
from nnbench.cli.app import backend_option, device_line, open_device, param_options
from nnbench.errors import NnbenchError
from nnbench.suites import gemm as gemm_suite


# -- profile --------------------------------------------------------------------------------------
@app.cli.command()
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
    be = open_device(backend)
    if launch_only:
        profile_suite.launch_only(be, suite, variant, overrides, shape, layers, batch)
        return
    if with_ncu and be.name != "cuda":
        raise NnbenchError("--ncu: needs the cuda backend (a GPU)")
    child = [sys.executable, "-m", "nnbench", *app.ARGV, "--launch-only"]
    prof = profile_suite.profile(be, suite, variant, overrides, shape, arch, with_ncu, child, layers=layers,
                                 batch=batch, kernel=kernel)
    app.out.print(device_line(results.environment(be)))
    for t in tables.profile_tables(prof):
        app.out.print(t)
    if be.name != "cuda":
        app.out.print("no GPU: resources and instruction mix only; achieved figures, the roofline and --ncu need one")

