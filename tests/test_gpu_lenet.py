"""On the GPU: LeNet-5's step on every path (nnbench/workloads/conv/lenet.py PATHS: the unroll teaching step, and
conv1/conv2 as implicit GEMMs on conv steps 9 and 10) against float64, launched and as one CUDA graph,
and a planted defect in the implicit kernels failing that check."""

import pytest

from nnbench import measure, workloads
from nnbench.workloads.conv import lenet

pytestmark = pytest.mark.gpu

FAST = measure.TimingSettings(budget_s=0.02, min_samples=3, max_noise=1.0)


def _hopper(cuda_backend):
    if why := workloads.get("conv", "implicit-wgmma").arch_problem(cuda_backend.device):
        pytest.skip(why)


@pytest.mark.parametrize("batch", [64, 50, 256])
def test_every_lenet5_path_matches_the_reference(cuda_backend, batch):
    """Each path's step (weight changes and loss after one SGD step) against float64, launched and as a
    graph; batch 50 leaves every implicit GEMM's last tile partly empty; at 256 the step faulted while the net
    let go of buffers its launchers still wrote (GpuLeNet.buffers)."""
    _hopper(cuda_backend)
    recs = {r["variant"]: r for r in lenet.run(cuda_backend, batch, settings=FAST, with_torch=False,
                                                paths=tuple(lenet.PATHS))}
    for path in lenet.PATHS:
        for what in ("step", "step-graph"):
            r = recs[lenet.row_name(path, what)]
            assert r["status"] == "PASS", (path, what, r.get("rel_err"), r.get("error"))


@pytest.mark.parametrize("defect", ["drop_tap"])
def test_a_dropped_filter_tap_in_the_implicit_path_fails_the_lenet5_check(cuda_backend, defect, tmp_path):
    """conv steps 9 and 10 built from a mutated copy of kernels_cu/ (tests/mutants.py: the last of each
    filter's 5 x 5 taps never gathered, in the forward, the data gradient and the filter gradient) fail
    LeNet-5's one-step check against float64; built from the shipped sources, the same step passes."""
    from contextlib import nullcontext

    from tests import mutants
    _hopper(cuda_backend)
    x, labels = lenet.images(2, 0)
    params = lenet.init_params(0)
    ref_loss, ref_params, _ = lenet.reference_step(params, x, labels, 0.05)
    errs = {}
    for planted in (False, True):
        with mutants.kernel_root(tmp_path, defect) if planted else nullcontext():
            net = lenet.GpuLeNet(cuda_backend, params, x, labels, 0.05, "implicit", None)
            errs[planted] = lenet.first_step_error(net, net.callable(net.step_launches), params, ref_loss,
                                                   ref_params)
    assert errs[False] <= lenet.check_limit(params, x, labels, 0.05, ref_loss, ref_params) < errs[True], errs
