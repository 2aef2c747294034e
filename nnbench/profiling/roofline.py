"""The roofline: where a measured kernel sits against a device's compute and memory ceilings.

attainable(AI) = min(peak FLOP/s, AI x bandwidth), AI = FLOPs / bytes of DRAM traffic. The bytes are
the workload's count of the fewest a kernel must move (a GEMM: A and B read once, C written once), so
AI is an upper bound and the achieved bandwidth a lower bound.

The compute roof is the kernel's precision's, as the tables' %peak is (runtime.device.DeviceInfo.peak_flops):
FP32 FFMA the FMA rate our own kernel measures (`nnbench devices --measure`), else the FP32 pipe's theory; TF32
the tensor cores' theoretical rate; 3xTF32 a third of it (three tensor-core products per product). Against
the FFMA roof a tensor-core GEMM read "% of roof 170.0": a point above its roof is a wrong roof or a timing
error, so it is flagged (`Position.suspect`) and no percentage over 100 is given.
"""

from __future__ import annotations

from dataclasses import dataclass

from nnbench.runtime.device import FFMA, TF32, TF32X3

ROOF_NAMES = {FFMA: "FP32 FFMA", TF32: "TF32 tensor", TF32X3: "3xTF32 = TF32 tensor / 3"}


@dataclass(frozen=True)
class Roof:
    flops: float  # FLOP/s
    bandwidth: float  # bytes/s
    source: str = "measured"
    name: str = ROOF_NAMES[FFMA]  # whose compute ceiling: the precision's (ROOF_NAMES)

    @property
    def ridge(self) -> float:
        """The arithmetic intensity (FLOP/byte) where the two ceilings meet."""
        return self.flops / self.bandwidth

    def attainable(self, intensity: float) -> float:
        return min(self.flops, intensity * self.bandwidth)


@dataclass(frozen=True)
class Position:
    intensity: float  # FLOP/byte
    achieved_flops: float  # FLOP/s
    achieved_bandwidth: float  # bytes/s
    bound: str  # "memory" or "compute"
    attainable: float  # FLOP/s at this intensity
    pct_of_roof: float | None  # achieved / attainable, in %; None where it would pass 100 (see `suspect`)
    suspect: str | None = None  # why the point cannot be right: above its roof


def position(flops: float, bytes_: float, seconds: float, roof: Roof) -> Position:
    if flops <= 0 or bytes_ <= 0 or seconds <= 0:
        raise ValueError("flops, bytes and seconds must be > 0")
    ai = flops / bytes_
    att = roof.attainable(ai)
    achieved = flops / seconds
    pct, suspect = 100.0 * achieved / att, None
    if pct > 100.0:
        suspect = (f"SUSPECT: {achieved / 1e12:.1f} TFLOP/s is above the {roof.name} roof at this intensity "
                   f"({att / 1e12:.1f} TFLOP/s): a wrong roof or a timing error")
        pct = None
    return Position(ai, achieved, bytes_ / seconds, "memory" if ai < roof.ridge else "compute", att, pct, suspect)


def roof_for(precision: str | None, device, measured: dict | None = None) -> Roof | None:
    """The roof of a kernel of `precision` on `device` (a DeviceInfo): the compute ceiling as the module
    docstring says, the bandwidth our copy kernel measured (`measured`: ceilings.measure_ceilings' dict),
    else DRAM's theory. None where nnbench has no ceiling for the precision (FP64, the host)."""
    name = ROOF_NAMES.get(precision)
    if name is None:
        return None
    bandwidth = measured["copy_gbs"] * 1e9 if measured else device.dram_peak_bytes
    if precision == FFMA and measured:
        return Roof(measured["fma_tflops"] * 1e12, bandwidth, "measured", name)
    peak = device.peak_flops(precision)
    if not peak:
        return None
    return Roof(peak, bandwidth, "theoretical compute, measured copy" if measured else "theoretical", name)
