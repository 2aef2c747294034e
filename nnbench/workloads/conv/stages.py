"""LeNet-5's step, stage by stage (`nnbench profile conv -v lenet5 --model lenet5 --stages`).

The variant's path (lenet.VARIANT_PATHS) is built afresh and its step checked against float64 (its weight
changes and loss after one step, logits poisoned first), as the case's record is; then every stage of the
step (lenet.GpuLeNet.stages: a layer's forward, its bias and ReLU, a pool, the loss, a layer's backward, the
update) is timed alone by `measure` (lenet.stage_times), its launches repeated back to back, and the whole
step the same way. A stage alone omits what it overlaps with its neighbours in the step, so the stages' sum
may differ from the step.
"""

from __future__ import annotations

from nnbench import measure
from nnbench.registry import Variant
from nnbench.workloads.base import TimeSplit
from nnbench.workloads.conv import lenet

KIND = "stages"


def refusal(variant: Variant, is_model: bool, models: list[str]) -> str | None:
    if is_model and variant.runner == "lenet":
        return None
    return f"--split {KIND}: splits a whole model's step; give --model lenet5 and -v one of {', '.join(models)}"


def stage_rows(timed: list[tuple[str, float, int]]) -> list[dict]:
    """The split's rows from lenet.stage_times' (name, median ms, launches)."""
    return [dict(part=name, kernels=kernels, median=ms * 1e-3) for name, ms, kernels in timed]


def stage_split(run: lenet.LeNetRun, path: str) -> TimeSplit:
    be = run.be
    net = lenet.GpuLeNet(be, run.params, run.x, run.labels, run.rate, path)
    split = TimeSplit(KIND, "step", f"each stage's launches timed alone by measure, then the whole step alike "
                      f"({net.description}, batch {run.batch})", timed=("median",), counts=("kernels",),
                      display="ms")
    split.rel_err = lenet.first_step_error(net, net.callable(net.step_launches), run.params, run.ref_loss,
                                           run.ref_params)
    split.rtol = run.limit()
    if not split.rel_err <= split.rtol:  # NaN fails too
        split.status = "FAIL"
        return split
    split.rows = stage_rows(lenet.stage_times(net, run.settings))
    split.whole_s = measure.measure(be, net.callable(net.step_launches), run.settings).median_ms * 1e-3
    return split
