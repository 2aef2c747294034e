"""The roofline: where a measured kernel sits against a device's compute and memory ceilings.

attainable(AI) = min(peak FLOP/s, AI x bandwidth), AI = FLOPs / bytes of DRAM traffic. The bytes are
the suite's count of the fewest a kernel must move (a GEMM: A and B read once, C written once), so
AI is an upper bound and the achieved bandwidth a lower bound. Ceilings are the measured ones
(`nnbench devices --measure`: our FMA and copy kernels) where available, else the theoretical.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Roof:
    flops: float  # FLOP/s
    bandwidth: float  # bytes/s
    source: str = "measured"

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
    pct_of_roof: float  # achieved / attainable, in %


def position(flops: float, bytes_: float, seconds: float, roof: Roof) -> Position:
    if flops <= 0 or bytes_ <= 0 or seconds <= 0:
        raise ValueError("flops, bytes and seconds must be > 0")
    ai = flops / bytes_
    att = roof.attainable(ai)
    achieved = flops / seconds
    return Position(ai, achieved, bytes_ / seconds, "memory" if ai < roof.ridge else "compute", att,
                    100.0 * achieved / att)
