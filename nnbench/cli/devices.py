"""`nnbench devices`: list the GPUs and, with --measure, their measured ceilings."""

from __future__ import annotations

import click
from rich.table import Table

from nnbench.cli import app
from nnbench.errors import NnbenchError


# -- devices --------------------------------------------------------------------------------------
@app.cli.command()
@click.option("--measure", "do_measure", is_flag=True,
              help="Also measure the FP32 FMA ceiling and copy bandwidth with nnbench's own kernels.")
def devices(do_measure: bool) -> None:
    """List GPUs: compute capability, SMs, clocks, memory, theoretical FP32 peak and DRAM bandwidth."""
    from nnbench import runtime
    from nnbench.errors import BackendUnavailable
    try:
        infos = runtime.devices()
    except BackendUnavailable as e:
        raise NnbenchError(str(e)) from None
    if not infos:
        raise NnbenchError("no CUDA GPU found on this machine")
    t = Table(title="CUDA devices", title_justify="left", header_style="bold")
    from nnbench.runtime.cuda import device_nvml
    from nnbench.runtime.nvml import USER_CLOCKS, reason_names
    cols = ["#", "name", "UUID", "CC", "SMs", "SM MHz", "mem MHz", "memory", "L2", "FP32 peak", "DRAM peak",
            "SM MHz now", "mem MHz now", "power now", "power limit", "clocks"]
    if do_measure:
        cols += ["FMA measured", "copy measured", "SM→SM", "grid barrier"]
    for c in cols:
        t.add_column(c, justify="left" if c in ("name",) else "right")
    from nnbench.suites.ceilings import measure_ceilings
    for i, d in enumerate(infos):
        nv = device_nvml(i)
        limits, reasons = nv.power_limits_w(), nv.reasons()
        limit = "—" if limits["enforced"] is None else f"{limits['enforced']:.0f} W" + (
            f" ({limits['min']:.0f}–{limits['max']:.0f})" if limits["min"] is not None else "")
        clocks = "—" if reasons is None else ("locked" if reasons & USER_CLOCKS else "free") + (
            f", {names}" if (names := reason_names(reasons & ~USER_CLOCKS)) else "")
        row = [str(i), d.name, nv.uuid() or "—", f"{d.cc[0]}.{d.cc[1]}", str(d.sm_count), f"{d.sm_clock_mhz:.0f}",
               f"{d.mem_clock_mhz:.0f}", f"{d.mem_bytes / 2**30:.1f} GiB", f"{d.l2_bytes / 2**20:.0f} MiB",
               f"{d.fp32_peak_flops / 1e12:.1f} TFLOP/s", f"{d.dram_peak_bytes / 1e9:,.0f} GB/s",
               _mhz(nv.clock("sm")), _mhz(nv.clock("mem")), _watts(nv.power_w()), limit, clocks]
        if do_measure:
            be, _ = runtime.open_backend("cuda", i)
            c = measure_ceilings(be)
            be.close()
            row += [f"{c['fma_tflops']:.1f} TFLOP/s ({c['fma_pct_theory']:.0f}%)",
                    f"{c['copy_gbs']:,.0f} GB/s ({c['copy_pct_theory']:.0f}%)", f"{c['handoff_us']:.2f} µs",
                    f"{c['grid_barrier_us']:.2f} µs"]
        t.add_row(*row)
    app.out.print(t)
    app.out.print("SM/mem MHz: the maximum clocks; 'now': NVML's reading at this moment (an idle GPU clocks down). "
                  "power limit: enforced (the range a root user may set with nvidia-smi -pl). clocks: 'locked' where a "
                  "user's setting holds them (nvidia-smi -lgc; docs/results/measurement.md), with any throttle "
                  "reason NVML reports now.")
    if do_measure:
        app.out.print("FMA: 8 independent FMA chains per thread, full occupancy. copy: grid-stride float4 copy of "
                  "1 GiB, counting bytes read + written. % = of the theoretical figure at the maximum clock. "
                  "SM→SM: one-way latency of a tagged 8-byte value passed between two blocks through L2. grid "
                  "barrier: one counter barrier across one block per SM.")



def _mhz(v) -> str:
    return f"{v:.0f}" if v else "—"


def _watts(v) -> str:
    return f"{v:.0f} W" if v is not None else "—"
