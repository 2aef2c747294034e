"""%peak per precision: each variant states its arithmetic, the device derives an FP32 FFMA and a
dense TF32 tensor-core ceiling per SM per clock, and a row's %peak is taken against its own."""

import numpy as np
import pytest

from nnbench import measure, results, workloads
from nnbench.runtime.cpu import CpuBackend
from nnbench.runtime.device import FFMA, HOST, PRECISIONS, TF32, TF32X3, DeviceInfo
from nnbench.workloads.gemm import session as gemm

H100 = DeviceInfo("NVIDIA H100 80GB HBM3", (9, 0), 132, 1980.0, 2619.0, 5120, 80 << 30, 50 << 20)
A100 = DeviceInfo("NVIDIA A100-SXM4-40GB", (8, 0), 108, 1410.0, 1215.0, 5120, 40 << 30, 40 << 20)


def test_the_ceilings_per_sm_per_clock_give_the_datasheets_figures():
    assert H100.fp32_peak_flops == pytest.approx(66.9e12, rel=1e-3)
    assert H100.tf32_peak_flops == pytest.approx(132 * 2048 * 1980e6)  # 535 TFLOP/s at the FP32 clock
    assert H100.tf32_peak_flops * 1830 / 1980 == pytest.approx(494.7e12, rel=1e-3)  # NVIDIA's, at 1830 MHz
    assert A100.tf32_peak_flops == pytest.approx(156e12, rel=2e-3)
    assert DeviceInfo("V100", (7, 0), 80, 1530.0, 877.0, 4096, 16 << 30, 6 << 20).tf32_peak_flops is None


def test_each_precision_has_its_ceiling():
    assert H100.peak_flops(FFMA) == H100.fp32_peak_flops
    assert H100.peak_flops(TF32) == H100.tf32_peak_flops
    assert H100.peak_flops(TF32X3) == pytest.approx(H100.tf32_peak_flops / 3)
    assert H100.peak_flops(HOST) is None and H100.peak_flops(None) is None
    assert H100.as_dict()["tf32_peak_tflops"] == pytest.approx(535.3, rel=1e-3)


def test_every_variant_states_its_precision():
    for v in workloads.all_variants():
        assert v.precision in PRECISIONS, v.name
        if v.backend == "cpu":
            assert v.precision == HOST, v.name
        elif "3xTF32" in v.summary:  # the summary, written for people, agrees with the data
            assert v.precision == TF32X3, v.name
        elif "one TF32 product" in v.summary:
            assert v.precision == TF32, v.name
        else:
            assert v.precision == FFMA, v.name
    assert workloads.get("gemm", "tf32x3").precision == TF32X3
    assert workloads.get("conv", "unroll").precision == TF32X3
    assert workloads.get("train", "batched").precision == TF32X3
    assert "precision" in results.FIELDS and "tf32_peak_tflops" in results.FIELDS


@pytest.mark.parametrize("precision", [FFMA, TF32X3, TF32])
def test_gemm_pct_peak_is_taken_against_the_rows_precision(precision):
    session = gemm.GemmSession(CpuBackend(), measure.TimingSettings(budget_s=0.01, min_samples=3), gemm.DEFAULT_RTOL,
                               seed=0)
    session.device = H100  # the H100's ceilings on the NumPy path's timing
    shape = gemm.Shape(64, 48, 40)
    bufs = session.buffers(shape)
    def build(ops):
        return lambda a, b: gemm._numpy_launcher(ops, a, b)
    rec = session._timed(dict(session.base_record(shape), precision=precision), bufs, build(bufs), build)
    achieved = shape.flops / (rec["median_ms"] * 1e-3)
    assert rec["pct_peak"] == pytest.approx(100 * achieved / H100.peak_flops(precision), rel=1e-9)
    assert np.isfinite(rec["pct_peak"])
