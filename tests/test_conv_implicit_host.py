"""Conv steps 9 and 10 (implicit GEMM on step 9's mainloop) on the host, without a GPU: the refusal
below sm_90 as one SKIP row while the other paths run, the filter gradient's split count, cuDNN's
backward rows only where a backward path runs, and each row compared with its own vendor row."""

import numpy as np

from nnbench import harness, workloads
from nnbench.runtime.device import DeviceInfo
from nnbench.workloads.base import Case
from nnbench.workloads.conv import launch as conv_launch
from nnbench.workloads.conv import problem as conv_problem
from nnbench.workloads.conv import session as conv

ConvShape = conv_problem.ConvShape

FORWARD = workloads.get("conv", "implicit-wgmma")
BACKWARD = workloads.get("conv", "implicit-wgmma-backward")


def _device(cc):
    return DeviceInfo("test GPU", cc, 108, 1410.0, 1215.0, 5120, 40 << 30, 40 << 20, smem_per_block_optin=232448)


class _Backend:
    name = "cuda"
    runs_kernels = True

    def __init__(self, cc):
        self.device = _device(cc)


def test_below_sm90_the_implicit_paths_are_one_skip_line_each():
    session = conv.ConvSession(_Backend((8, 0)), None, 1e-4, 0, {})
    shape = ConvShape(2, 3, 9, 9, 4, 3, 1, 1)
    for v in (FORWARD, BACKWARD):
        rec = session.run_case(Case.defaults(v), shape, compiled=None)
        assert rec["status"] == "SKIP"
        assert "sm_90a" in rec["error"] and "sm_80" in rec["error"] and "\n" not in rec["error"]
    # ... and planning still lists every path, the implicit ones included
    assert {"unroll", "implicit-wgmma"} <= {v.name for v, _ in conv.plan([], "cuda", {})}


def test_defaults_and_build_target():
    assert FORWARD.defaults() == {"BM": 128, "BN": 64, "BK": 32, "STAGES": 4, "PRODUCER_WGS": 2, "PRECISION": 3}
    assert FORWARD.launch_block(FORWARD.defaults()) == (512, 1, 1)  # 2 producer + 2 consumer warpgroups
    assert FORWARD.target("sm_80") == BACKWARD.target("sm_90") == "sm_90a"
    # TF32's own limit, from its precision (each product off by up to (1 + 2^-10)^2 - 1), FP32-level for 3xTF32's
    tf32, shape = workloads.get("conv", "implicit-wgmma-tf32"), ConvShape(2, 64, 9, 9, 4, 3, 1, 1)
    assert conv.bounds.forward_limit(tf32.precision, shape) > 1.9e-3 > 1e-4 > conv.bounds.forward_limit(
        FORWARD.precision, shape)


def test_filter_gradient_slices_fill_the_sms_with_at_least_four_k_blocks_each():
    assert conv_launch.filter_grad_slices(tiles=9, k_blocks=3136, sms=132) == 14
    assert conv_launch.filter_grad_slices(tiles=9, k_blocks=20, sms=132) == 5
    assert conv_launch.filter_grad_slices(tiles=200, k_blocks=3136, sms=132) == 1
    assert conv_launch.filter_grad_slices(tiles=1, k_blocks=3, sms=132) == 1


def test_cudnn_backward_rows_only_where_a_backward_path_runs():
    fwd, bwd = [Case.defaults(FORWARD)], [Case.defaults(FORWARD), Case.defaults(BACKWARD)]
    names = conv.WORKLOAD.vendor_names("cuda")
    assert [n for n in names if conv.WORKLOAD.vendor_wanted(n, fwd)] == ["cudnn", "cudnn-tf32", "torch"]
    assert {"cudnn-backward", "cudnn-backward-tf32"} <= {n for n in names if conv.WORKLOAD.vendor_wanted(n, bwd)}


def test_a_backward_row_is_compared_with_cudnns_backward_not_its_forward():
    comp = harness.Comparisons(conv.WORKLOAD)
    shape = "N32 C64 56x56 K64 3x3 p1"
    for variant, vendor, ms in (("cudnn", "", 0.24), ("cudnn-backward", "cudnn-backward", 0.48)):
        comp.derive(dict(variant=variant, vendor=vendor, shape=shape, median_ms=ms, status="PASS"))
    fwd = comp.derive(dict(variant="implicit-wgmma", shape=shape, median_ms=0.12, status="PASS"))
    bwd = comp.derive(dict(variant="implicit-wgmma-backward", vendor="cudnn-backward", shape=shape, median_ms=0.24,
                           status="PASS"))
    assert np.isclose(fwd["pct_vendor"], 200.0) and fwd["vendor"] == "cudnn"
    assert np.isclose(bwd["pct_vendor"], 200.0) and bwd["vendor"] == "cudnn-backward"


def test_forward_splits_k_only_where_the_last_wave_is_short():
    assert conv_launch.forward_slices(tiles=784, k_blocks=18, sms=132) == 1  # 5.9 full waves
    assert conv_launch.forward_slices(tiles=196, k_blocks=36, sms=132) == 2  # 74% of 2 waves -> 99% of 3
    assert conv_launch.forward_slices(tiles=196, k_blocks=18, sms=132) == 1  # 9 k-blocks a slice: measured slower
    assert conv_launch.forward_slices(tiles=392, k_blocks=36, sms=132) == 1
    assert conv_launch.forward_slices(tiles=1, k_blocks=48, sms=132) == 3
    assert conv_launch.forward_slices(tiles=4, k_blocks=31, sms=132) == 1  # a slice needs 16 k-blocks


def test_the_data_gradient_splits_k_as_the_forward_does_at_stride_1_only():
    sms = 132
    layer2, strided = conv_problem.load_sets()["resnet"][1:]
    assert conv_launch.conv_data_slices(layer2, 128, 128, 32, sms) == 2  # 196 tiles: 2 slices of 18 k-blocks
    assert conv_launch.conv_data_slices(strided, 128, 128, 32, sms) == 1  # gridDim.z holds its 4 phases
    assert conv_launch.conv_data_slices(ConvShape(1, 20, 11, 13, 128, 3, 1, 1), 128, 128, 32, sms) == 2
    assert conv_launch.conv_data_slices(ConvShape(2, 3, 9, 9, 4, 3, 1, 1), 128, 64, 32, sms) == 1  # 1 k-block
