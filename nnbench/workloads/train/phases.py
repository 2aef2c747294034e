"""Where a persistent version's iteration goes, phase by phase (`nnbench profile train -v fused --phases`).

The version is built once more with PHASE_TIMES (kernels_cu/mlp/fused_common.cuh's PhaseTimer): thread 0 of
block 0 adds, per phase of the iteration, the SM cycles it waited for the values the phase needs (wait) and
the cycles from then until the next phase's wait (work: its own part of the critical path), over one launch;
the launch's own cycles and nanoseconds turn them into time. That build is checked against float64 as the
case is, then timed over one launch of the problem's iterations (at most fused.EPOCHS_PER_LAUNCH epochs)
after a warm-up launch; the iteration's whole time is that launch's CUDA events over its iterations. Block 0
is one block's view: a phase another block finishes later shows up as the next phase's wait.
"""

from __future__ import annotations

import numpy as np

from nnbench.registry import Variant
from nnbench.runtime.compile import variant_module
from nnbench.workloads.base import TimeSplit
from nnbench.workloads.train import fused, mlp

KIND = "phases"
RUNNER = "fused"  # the versions whose kernels keep phase clocks (every persistent one)
# what bounds a phase's wait: one value handed from SM to SM, one grid barrier (nnbench devices --measure)
CEILINGS = ("handoff_us", "grid_barrier_us")


def phase_names(layers: tuple[int, ...], out_local: bool) -> list[tuple[str, int]]:
    """(name, values awaited) of each phase of an iteration, in the kernel's order: the forward phases
    await layer l's outputs ("fwd l"), the backward phases that poll await layer l + 1's deltas ("bwd l",
    the last layer first); with the output layer in every block its deltas and the next are local."""
    L = len(layers) - 1
    polled = fused.phases_per_iteration(layers, out_local) - (L - 1)
    return ([(f"fwd {l}", layers[l]) for l in range(1, L)]
            + [(f"bwd {l}", layers[l + 1]) for l in range(polled - 1, -1, -1)])


def phase_rows(layers: tuple[int, ...], out_local: bool, wait_s: np.ndarray, work_s: np.ndarray) -> list[dict]:
    """The split's rows from the per-phase seconds per iteration (FusedNet.phase_times, in seconds)."""
    names = phase_names(layers, out_local)
    if len(names) != len(wait_s) or len(names) != len(work_s):
        raise ValueError(f"{len(names)} phases for layers {layers}, but {len(wait_s)} wait and {len(work_s)} "
                         "work clocks")
    return [dict(part=name, values=n, wait=float(w), work=float(k))
            for (name, n), w, k in zip(names, wait_s, work_s)]


def refusal(variant: Variant, clocked: list[str]) -> str | None:
    if variant.runner == RUNNER:
        return None
    return f"--split {KIND}: {variant.name} keeps no phase clocks; give a persistent version: {', '.join(clocked)}"


def phase_split(run: mlp.PerSampleRun, variant: Variant, params: dict) -> TimeSplit:
    be, layers, hyper = run.be, run.layers, run.hyper
    comp = variant_module(variant, dict(params, PHASE_TIMES=1), be.arch)
    iterations = min(hyper.max_iterations, fused.EPOCHS_PER_LAUNCH * len(run.train))
    split = TimeSplit(KIND, "iteration", f"block 0's clocks in the PHASE_TIMES build, over one launch of "
                      f"{iterations} iterations; the iteration: that launch's CUDA events per iteration",
                      timed=("wait", "work"), counts=("values",), ceilings=CEILINGS)
    split.rel_err = mlp.check_version(be, variant, params, comp, layers, run.init, run.train, hyper, run.blocks,
                                      run.ref)
    split.rtol = run.limit(params)
    if not split.rel_err <= split.rtol:  # NaN fails too
        split.status = "FAIL"
        return split
    net = mlp.fused_net(be, variant, params, comp, layers, run.init, run.train, hyper, run.blocks)
    net.train(len(run.train), -1.0)  # warm-up: the first launch of the module
    seconds, _ = net.train(iterations, -1.0)
    wait_us, work_us, mhz = net.phase_times(iterations)
    split.whole_s = seconds / iterations
    split.rows = phase_rows(layers, net.out_local, wait_us * 1e-6, work_us * 1e-6)
    split.notes = (f"{net.blocks} blocks; block 0's SM clock over the launch: {mhz:.0f} MHz",)
    return split
