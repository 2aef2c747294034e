"""Convolution problems: NCHW layer shapes, their counters, the named sets of configs/conv.yaml,
and which paths a layer refuses."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nnbench import paths
from nnbench.errors import NnbenchError
from nnbench.registry import Variant
from nnbench.yamlnodes import compose, fail, integer, mapping, sequence

DEFAULT_RTOL = None  # each row's limit from its precision and reduction length (bounds.py); --rtol sets one
CONSTANT_FLOATS = 16384  # 02_constant.cu's filter bank: 64 KiB of constant memory
TILED_RMAX, TILED_SMAX = 11, 2  # 03_tiled.cu's compile-time limits


@dataclass(frozen=True)
class ConvShape:
    N: int
    C: int
    H: int
    W: int
    K: int
    R: int
    stride: int = 1
    pad: int = 0

    @property
    def Ho(self) -> int:
        return (self.H + 2 * self.pad - self.R) // self.stride + 1

    @property
    def Wo(self) -> int:
        return (self.W + 2 * self.pad - self.R) // self.stride + 1

    @property
    def label(self) -> str:
        return (f"N{self.N} C{self.C} {self.H}x{self.W} K{self.K} {self.R}x{self.R}"
                + (f" s{self.stride}" if self.stride != 1 else "") + (f" p{self.pad}" if self.pad else ""))

    @property
    def flops(self) -> float:
        return 2.0 * self.N * self.K * self.C * self.R * self.R * self.Ho * self.Wo

    @property
    def bytes(self) -> float:
        """The fewest bytes: read X and the filters once, write Y once."""
        return 4.0 * (self.N * self.C * self.H * self.W + self.K * self.C * self.R * self.R
                      + self.N * self.K * self.Ho * self.Wo)

    def as_dict(self) -> dict[str, int]:
        return {"N": self.N, "C": self.C, "H": self.H, "W": self.W, "K": self.K, "R": self.R, "stride": self.stride,
                "pad": self.pad}

    def footprint(self) -> tuple[float, float]:
        """(host bytes, device bytes) one layer needs: fp32 tensors and their fp64 reference (with a
        temporary the size of the output) on the host; two copies of each tensor and the unrolled
        input on the device."""
        tensors = self.N * self.C * self.H * self.W + self.K * self.C * self.R * self.R + \
            self.N * self.K * self.Ho * self.Wo
        out = self.N * self.K * self.Ho * self.Wo
        return float(12 * tensors + 16 * out + self.unroll_bytes), float(8 * tensors + self.unroll_bytes)

    @property
    def unroll_bytes(self) -> int:
        """The unroll path's workspace: the C*R*R x N*Ho*Wo matrix (the K^2 blow-up), plus the GEMM's
        output before it is moved to NCHW."""
        return 4 * self.N * self.Ho * self.Wo * (self.C * self.R * self.R + self.K)

    def dims(self) -> np.void:
        """The kernels' `ConvDims` struct (ten ints), as the record PyCUDA passes by value."""
        names = ("N", "C", "H", "W", "K", "R", "stride", "pad", "Ho", "Wo")
        values = (self.N, self.C, self.H, self.W, self.K, self.R, self.stride, self.pad, self.Ho, self.Wo)
        return np.array(values, dtype=np.dtype([(n, "<i4") for n in names]))[()]

    def validate(self) -> None:
        for name in ("N", "C", "H", "W", "K", "R", "stride"):
            if getattr(self, name) < 1:
                raise NnbenchError(f"--{name.lower()} {getattr(self, name)}: must be >= 1")
        if self.pad < 0:
            raise NnbenchError(f"--pad {self.pad}: must be >= 0")
        if self.R > self.H + 2 * self.pad or self.R > self.W + 2 * self.pad:
            raise NnbenchError(f"--r {self.R}: the filter is larger than the {self.H}x{self.W} input with pad "
                               f"{self.pad}")
        if self.stride > max(self.H, self.W) + 2 * self.pad:  # past it every stride gives the same one window,
            raise NnbenchError(f"--stride {self.stride}: larger than the padded input; at most "  # and the kernels'
                               f"{max(self.H, self.W) + 2 * self.pad} (H or W + 2 * pad)")  # int32 would overflow
        for what, n in (("X", self.N * self.C * self.H * self.W), ("Y", self.N * self.K * self.Ho * self.Wo),
                        ("the filters", self.K * self.C * self.R * self.R)):
            if n >= 2**31:
                raise NnbenchError(f"{self.label}: {what} has {n:,} elements; the kernels index with 32-bit ints")


SETS_FILE = paths.CONFIGS / "conv.yaml"
LAYER_KEYS = ["n", "c", "h", "w", "k", "r", "stride", "pad"]


def load_sets(path: Path = SETS_FILE) -> dict[str, list[ConvShape]]:
    """configs/conv.yaml -> {set name: layers}; a bad key or value names the file and line."""
    top = mapping(path, compose(path), "top level", ["sets"], required=("sets",))
    out = {}
    for name, (_, body) in mapping(path, top["sets"][1], "sets").items():
        layers = []
        for i, node in enumerate(sequence(path, body, f"sets.{name}")):
            keys = mapping(path, node, f"sets.{name}[{i}]", LAYER_KEYS, required=tuple(LAYER_KEYS[:6]))
            vals = {k: integer(path, v, f"sets.{name}[{i}].{k}", minimum=0 if k == "pad" else 1)
                    for k, (_, v) in keys.items()}
            shape = ConvShape(vals["n"], vals["c"], vals["h"], vals["w"], vals["k"], vals["r"], vals.get("stride", 1),
                              vals.get("pad", 0))
            try:
                shape.validate()
            except NnbenchError as e:
                raise fail(path, node, f"sets.{name}[{i}]: {e}") from None
            layers.append(shape)
        out[str(name)] = layers
    return out


def refusal(v: Variant, params: dict, shape: ConvShape) -> str | None:
    """Why a path cannot run this layer (None when it can): the fixed limits of its kernel."""
    if v.runner == "constant" and shape.C * shape.R * shape.R > CONSTANT_FLOATS:
        return (f"constant: one output map's filters ({shape.C * shape.R * shape.R:,} floats) exceed the "
                f"{CONSTANT_FLOATS:,} of 64 KiB constant memory")
    if v.source == "conv/03_tiled.cu" and (shape.R > TILED_RMAX or shape.stride > TILED_SMAX):
        return f"tiled: supports filters up to {TILED_RMAX}x{TILED_RMAX} and strides up to {TILED_SMAX}"
    return None
