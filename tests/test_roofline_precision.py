"""The roofline of `nnbench profile` and of the report's plot takes the kernel's precision's roof (FP32 FFMA,
TF32, 3xTF32 = TF32 / 3, as the tables' %peak does), names it, and never shows more than 100% of a roof: a
point above its roof is flagged SUSPECT. Issue 43: step 9 (3xTF32) at 4096^3 read "% of roof 170.0" against
the FFMA roof."""

from __future__ import annotations

import io

import pandas as pd
import pytest
from rich.console import Console

from nnbench import measure, registry
from nnbench.profiling.profile import KernelProfile, Profile
from nnbench.profiling.roofline import ROOF_NAMES, Roof, position, roof_for
from nnbench.report import plots, tables
from nnbench.runtime.device import FFMA, FP64, TF32, TF32X3, DeviceInfo
from nnbench.workloads.gemm.variants import VARIANTS

H100 = DeviceInfo(name="NVIDIA H100 80GB HBM3", cc=(9, 0), sm_count=132, sm_clock_mhz=1980, mem_clock_mhz=2619,
                  bus_width_bits=5120, mem_bytes=80 << 30, l2_bytes=50 << 20)
MEASURED = {"fma_tflops": 65.9, "copy_gbs": 2900.0}  # the H100's ceilings as `devices --measure` reads them
STEP9 = dict(flops=2.0 * 4096**3, bytes_=3 * 4.0 * 4096**2, seconds=1.2231e-3)  # 112.4 TFLOP/s (issue 43)


def test_each_precision_has_its_roof():
    assert roof_for(FFMA, H100, MEASURED).flops == pytest.approx(65.9e12)
    assert roof_for(TF32, H100, MEASURED).flops == pytest.approx(H100.peak_flops(TF32))
    assert roof_for(TF32X3, H100, MEASURED).flops == pytest.approx(H100.peak_flops(TF32) / 3)
    assert roof_for(TF32X3, H100, MEASURED).name == ROOF_NAMES[TF32X3] == "3xTF32 = TF32 tensor / 3"
    assert roof_for(TF32X3, H100, MEASURED).bandwidth == pytest.approx(2.9e12)
    assert roof_for(FFMA, H100).flops == pytest.approx(H100.fp32_peak_flops)  # no measurement: the theory
    assert roof_for(FP64, H100, MEASURED) is None


def test_step9_on_its_own_roof_is_below_100_percent():
    where = position(**STEP9, roof=roof_for(TF32X3, H100, MEASURED))
    assert where.suspect is None and 55 < where.pct_of_roof < 70  # 112.4 of 178.4 TFLOP/s


def test_a_point_above_its_roof_is_flagged_never_given_over_100_percent():
    where = position(**STEP9, roof=roof_for(FFMA, H100, MEASURED))  # the old roof: 170%
    assert where.pct_of_roof is None and where.suspect.startswith("SUSPECT") and "FP32 FFMA" in where.suspect
    at = position(flops=2e12, bytes_=1e9, seconds=1.0, roof=Roof(2e12, 1e12))  # exactly on the roof
    assert at.pct_of_roof == pytest.approx(100.0) and at.suspect is None


def achieved_text(roof: Roof) -> str:
    v = registry.find(VARIANTS, "gemm", "tf32x3_wgmma")
    rec = dict(variant=v.name, status="PASS", unit="launch", precision=TF32X3, rel_err=1e-7,
               **measure.summarize([1.2231]).as_record())
    prof = Profile("gemm", v, v.defaults(), "sm_90a", H100.name, [KernelProfile("gemm", 384, 168, 0, 0, 0, 1, 0.19,
                   "registers")], problem=type("P", (), {"label": "4096×4096×4096"})(), record=rec,
                   flops=STEP9["flops"], bytes=STEP9["bytes_"], seconds=STEP9["seconds"], roof=roof,
                   where=position(**STEP9, roof=roof))
    out = io.StringIO()
    console = Console(file=out, width=250, color_system=None)
    for t in tables.profile_tables(prof)[2:]:
        console.print(t)
    return out.getvalue()


def test_the_profile_table_names_the_roof_and_flags_a_point_above_it():
    right = achieved_text(roof_for(TF32X3, H100, MEASURED))
    assert "3xTF32 = TF32 tensor / 3" in right and "SUSPECT" not in right
    wrong = achieved_text(roof_for(FFMA, H100, MEASURED))
    assert "SUSPECT" in wrong and "a wrong roof or a timing error" in wrong and "170" not in wrong


def rows(**over) -> pd.DataFrame:
    base = dict(variant="tf32x3_wgmma", shape="4096×4096×4096", flops=STEP9["flops"], bytes=STEP9["bytes_"],
                median_ms=1.2231, precision=TF32X3, status="PASS", gpu=H100.name,
                fp32_peak_tflops=H100.fp32_peak_flops / 1e12, tf32_peak_tflops=H100.peak_flops(TF32) / 1e12,
                dram_peak_gbs=H100.dram_peak_bytes / 1e9)
    return pd.DataFrame([dict(base, **over)])


def test_the_plot_draws_the_3xtf32_roof_and_flags_a_point_above_its_roof():
    pytest.importorskip("matplotlib")
    labels = plots.figure(rows(), "roofline").axes[0].get_legend_handles_labels()[1]
    assert any(label.startswith("3xTF32 = TF32 tensor / 3 peak 178.4") for label in labels), labels
    assert not any("SUSPECT" in label for label in labels)
    assert not plots.above_roof(rows().assign(ai=1.0, tflops=0.1)).any()
    # the same time labelled FP32 FFMA: above the FP32 pipe's 66.9 TFLOP/s
    labels = plots.figure(rows(precision=FFMA), "roofline").axes[0].get_legend_handles_labels()[1]
    assert any(label.startswith("SUSPECT: above its precision's roof (1)") for label in labels), labels
