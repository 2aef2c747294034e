"""Nsight Compute on one kernel launch, with a curated metric set parsed into a table.

`nnbench profile ... --ncu` runs `ncu` on a child nnbench process that only launches the kernel
(`--launch-only`), skipping the warm-up launches, with --clock-control none and
--cache-control none so that ncu's duration is measured under the same conditions as nnbench's own
CUDA-event median (boost clock, warm L2): the two are printed side by side.

The tensor pipe's active cycles count HMMA (mma.sync) and, on Hopper, HGMMA (wgmma) alike; on Hopper
(sm_90) it adds the wgmma instructions and the `gmma` stall (warps waiting on a warpgroup's wgmma),
which exist only there. The names are ncu 2025.3's (`ncu --query-metrics --chip gh100`, read on an
H100). `--ncu-csv FILE` keeps ncu's raw CSV.
"""

from __future__ import annotations

import csv
import io
import shutil
import subprocess

from nnbench.errors import NnbenchError

WARMUP_LAUNCHES = 3  # the child launches this many first; ncu skips them

METRICS = {
    "gpu__time_duration.sum": "duration",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved occupancy %",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "DRAM throughput %",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed": "L2 throughput %",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "SM throughput %",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": "shared-load bank conflicts",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum": "shared-store bank conflicts",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": "tensor pipe active % (HMMA, HGMMA)",
}
TENSOR_PIPE = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
# sm_90 only (`ncu --query-metrics` on the H100 lists them; other chips lack them).
HOPPER_METRICS = {
    "sm__inst_executed_pipe_tensor_op_gmma.sum": "wgmma instructions",
}
HOPPER_STALLS = ("gmma",)
STALLS = ("long_scoreboard", "short_scoreboard", "mio_throttle", "math_pipe_throttle", "barrier", "wait",
          "not_selected", "lg_throttle", "dispatch_stall", "no_instruction", "branch_resolving", "membar")
STALL_METRIC = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"


def available() -> str | None:
    return shutil.which("ncu")


def labels(hopper: bool) -> dict[str, str]:
    """The metrics asked for, with their table labels, stalls aside."""
    return {**METRICS, **(HOPPER_METRICS if hopper else {})}


def stalls(hopper: bool) -> tuple[str, ...]:
    return STALLS + (HOPPER_STALLS if hopper else ())


def metric_names(hopper: bool = False) -> list[str]:
    return list(labels(hopper)) + [STALL_METRIC.format(s) for s in stalls(hopper)]


def command(ncu: str, kernel: str, child: list[str], hopper: bool = False) -> list[str]:
    return [ncu, "--csv", "--page", "raw", "--metrics", ",".join(metric_names(hopper)), "--kernel-name", kernel,
            "--launch-skip", str(WARMUP_LAUNCHES), "--launch-count", "1", "--clock-control", "none",
            "--cache-control", "none", *child]


def run(kernel: str, child: list[str], hopper: bool = False) -> tuple[dict[str, tuple[float, str]], str]:
    """(the metrics, ncu's raw CSV output) of one launch of `kernel` in the child process."""
    ncu = available()
    if ncu is None:
        raise NnbenchError("--ncu: Nsight Compute (ncu) is not on PATH; install it with the CUDA toolkit, or "
                           "leave --ncu out")
    out = subprocess.run(command(ncu, kernel, child, hopper), capture_output=True, text=True, timeout=600)
    metrics = parse(out.stdout)
    if not metrics:
        why = (out.stderr or out.stdout).strip().splitlines()
        raise NnbenchError(f"--ncu: ncu returned no metrics for kernel {kernel}: {why[-1] if why else 'no output'}")
    return metrics, out.stdout


def parse(text: str) -> dict[str, tuple[float, str]]:
    """ncu --csv --page raw output -> {metric: (value, unit)} for the first profiled launch."""
    rows = list(csv.reader(io.StringIO("\n".join(ln for ln in text.splitlines() if ln.startswith('"')))))
    if len(rows) < 3:
        return {}
    header, units, values = rows[0], rows[1], rows[2]
    out = {}
    for name, unit, value in zip(header, units, values):
        if "__" not in name:
            continue
        try:
            out[name] = (float(value.replace(",", "")), unit)
        except ValueError:
            continue
    return out


def duration_ms(metrics: dict[str, tuple[float, str]]) -> float | None:
    if "gpu__time_duration.sum" not in metrics:
        return None
    v, unit = metrics["gpu__time_duration.sum"]
    return v * {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0}.get(unit, 1e-6)


def top_stalls(metrics: dict[str, tuple[float, str]], n: int = 3) -> list[tuple[str, float]]:
    """The n largest stall reasons in cycles per issued instruction, with Hopper's where ncu gave them."""
    found = [(s, metrics[STALL_METRIC.format(s)][0]) for s in stalls(True) if STALL_METRIC.format(s) in metrics]
    return sorted(found, key=lambda x: -x[1])[:n]


def tensor_pipe_pct(metrics: dict[str, tuple[float, str]]) -> float | None:
    """The tensor pipe's active cycles in % of its peak over the SMs' active cycles, or None."""
    v = metrics.get(TENSOR_PIPE)
    return None if v is None else v[0]
