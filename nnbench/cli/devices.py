"""`nnbench devices`: list the GPUs and, with --measure, their measured ceilings."""

from __future__ import annotations

import click
from rich.markup import escape
from rich.table import Table

from nnbench.cli import app
from nnbench.errors import NnbenchError

COLUMNS = ["#", "name", "UUID", "CC", "SMs", "SM MHz", "mem MHz", "memory", "L2", "FP32 peak", "DRAM peak",
           "SM MHz now", "mem MHz now", "power now", "power limit", "clocks"]
MEASURED = ["FMA measured", "copy measured", "SM→SM", "grid barrier"]


# -- devices --------------------------------------------------------------------------------------
@app.cli.command()
@click.option("--measure", "do_measure", is_flag=True,
              help="Also measure the FP32 FMA ceiling and copy bandwidth with nnbench's own kernels.")
@app.json_option
def devices(do_measure: bool) -> None:
    """List GPUs: compute capability, SMs, clocks, memory, theoretical FP32 peak and DRAM bandwidth,
    the clocks and power now, the power limits and whether the clocks are locked. Without a GPU: the
    CPU that the cpu backend runs on."""
    from nnbench import runtime
    from nnbench.errors import BackendUnavailable
    if app.JSON[0] is not None:
        app.refuse_taken(app.JSON[0])
    try:
        infos = runtime.devices()
        why = None if infos else "no CUDA GPU found on this machine"
    except BackendUnavailable as e:
        infos, why = [], str(e)
    if why is not None:
        if do_measure:
            raise NnbenchError(f"--measure: needs a GPU; {why}")
        facts = [cpu_facts()]
        app.err.print(f"nnbench: no CUDA GPU: {escape(why)}", soft_wrap=True)
        app.out.print(f"CPU backend: NumPy float32 on {escape(facts[0]['name'])}, {facts[0]['cores']} cores")
    else:
        facts = [gpu_facts(i, d, do_measure) for i, d in enumerate(infos)]
        _print_table(facts, do_measure)
    if app.JSON[0] is not None:
        from nnbench import rawresults
        app.out.print(f"JSON: {escape(str(rawresults.write_document(app.JSON[0], 'devices', facts)))}")


def cpu_facts() -> dict:
    """The one device of a machine without a GPU: the processor that the cpu backend runs on."""
    import os

    from nnbench.runtime.cpu import cpu_model
    return {"kind": "device", "backend": "cpu", "index": None, "name": cpu_model(), "cores": os.cpu_count()}


def gpu_facts(i: int, d, do_measure: bool) -> dict:
    """GPU `i`'s facts and NVML readings (SI-ish units: MHz, bytes, FLOP/s, bytes/s, W), None where NVML
    gave nothing: the one source of the table and the --json line."""
    from nnbench import runtime
    from nnbench.runtime.cuda import device_nvml
    from nnbench.runtime.nvml import USER_CLOCKS, reason_names
    nv = device_nvml(i)
    reasons = nv.reasons()
    facts = {"kind": "device", "backend": "cuda", "index": i, "name": d.name, "uuid": nv.uuid(),
             "cc": f"{d.cc[0]}.{d.cc[1]}", "sms": d.sm_count, "max_sm_clock_mhz": d.sm_clock_mhz,
             "max_mem_clock_mhz": d.mem_clock_mhz, "memory_bytes": d.mem_bytes, "l2_bytes": d.l2_bytes,
             "fp32_peak_flops": d.fp32_peak_flops, "dram_peak_bytes_per_s": d.dram_peak_bytes,
             "sm_clock_mhz_now": nv.clock("sm"), "mem_clock_mhz_now": nv.clock("mem"), "power_w_now": nv.power_w(),
             "power_limits_w": nv.power_limits_w(),
             "clocks_locked": None if reasons is None else bool(reasons & USER_CLOCKS),
             "throttle_reasons": None if reasons is None else reason_names(reasons & ~USER_CLOCKS),
             "ceilings": None}
    if do_measure:
        from nnbench.profiling.ceilings import measure_ceilings
        be, _ = runtime.open_backend("cuda", i)
        try:
            facts["ceilings"] = measure_ceilings(be)
        finally:
            be.close()
    return facts


def _print_table(facts: list[dict], do_measure: bool) -> None:
    t = Table(title="CUDA devices", title_justify="left", header_style="bold")
    for c in COLUMNS + (MEASURED if do_measure else []):
        t.add_column(c, justify="left" if c in ("name",) else "right")
    for f in facts:
        limits = f["power_limits_w"]
        limit = "—" if limits["enforced"] is None else f"{limits['enforced']:.0f} W" + (
            f" ({limits['min']:.0f}–{limits['max']:.0f})" if limits["min"] is not None else "")
        clocks = "—" if f["clocks_locked"] is None else ("locked" if f["clocks_locked"] else "free") + (
            f", {f['throttle_reasons']}" if f["throttle_reasons"] else "")
        row = [str(f["index"]), f["name"], f["uuid"] or "—", f["cc"], str(f["sms"]), f"{f['max_sm_clock_mhz']:.0f}",
               f"{f['max_mem_clock_mhz']:.0f}", f"{f['memory_bytes'] / 2**30:.1f} GiB",
               f"{f['l2_bytes'] / 2**20:.0f} MiB", f"{f['fp32_peak_flops'] / 1e12:.1f} TFLOP/s",
               f"{f['dram_peak_bytes_per_s'] / 1e9:,.0f} GB/s", _mhz(f["sm_clock_mhz_now"]),
               _mhz(f["mem_clock_mhz_now"]), _watts(f["power_w_now"]), limit, clocks]
        if (c := f["ceilings"]) is not None:
            row += [f"{c['fma_tflops']:.1f} TFLOP/s ({c['fma_pct_theory']:.0f}%)",
                    f"{c['copy_gbs']:,.0f} GB/s ({c['copy_pct_theory']:.0f}%)", f"{c['handoff_us']:.2f} µs",
                    f"{c['grid_barrier_us']:.2f} µs"]
        t.add_row(*row)
    app.out.print(t)
    app.out.print("SM/mem MHz: the maximum clocks; 'now': NVML's reading at this moment (an idle GPU clocks down). "
                  "power limit: enforced (the range a root user may set with nvidia-smi -pl). clocks: 'locked' where a "
                  "user's setting holds them (nvidia-smi -lgc; docs/gate.md), with any throttle "
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
