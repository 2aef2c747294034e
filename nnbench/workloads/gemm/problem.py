"""GEMM problems in YAML: `[M, N, K]`, the named sets of configs/shapes.yaml, and the GEMMs of
one training step of a net (`{set: mlp, nets: [8], batch: 256}`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from nnbench import nets, paths
from nnbench.errors import NnbenchError
from nnbench.yamlnodes import compose, fail, integer, mapping, scalar, sequence, string

INDEX_LIMIT = 2**31  # the kernels index with 32-bit ints: every matrix stays under this many elements


@dataclass(frozen=True)
class Shape:
    M: int
    N: int
    K: int

    def as_dict(self) -> dict[str, int]:
        return {"M": self.M, "N": self.N, "K": self.K}

    @property
    def label(self) -> str:
        return f"{self.M}×{self.N}×{self.K}"

    @property
    def flops(self) -> float:
        return 2.0 * self.M * self.N * self.K

    @property
    def bytes(self) -> float:
        """The fewest bytes a beta = 0 GEMM moves: read A and B once, write C once."""
        return 4.0 * (self.M * self.K + self.K * self.N + self.M * self.N)



def validate_shape(shape: Shape) -> None:
    for name, v in shape.as_dict().items():
        if v < 1:
            raise NnbenchError(f"--{name.lower()} {v}: sizes must be integers >= 1")
    for a, b in (("M", "K"), ("K", "N"), ("M", "N")):
        n = getattr(shape, a) * getattr(shape, b)
        if n >= INDEX_LIMIT:
            raise NnbenchError(f"shape {shape.label}: {a}*{b} = {n:,} elements exceeds the ladder's 32-bit index "
                               f"range (< {INDEX_LIMIT:,})")


def footprint(shape: Shape) -> tuple[float, float]:
    """(host bytes, device bytes) one shape needs at its peak, estimated before anything is made.
    Host: A, B, C0 (fp32) and A @ B (fp64) kept, A and B in fp64 while the product is made, and the
    fp64 references and magnitudes and the temporaries of one. Device: A, B, C, C0 (fp32) and the two
    references and two magnitudes (fp64), and while the fresh-buffers check runs, its A, B and C (fp32) and
    its reference, -A @ B (fp64); its host temporaries (-A, -A @ B) stay under the peak of making the references."""
    ab, mn = shape.M * shape.K + shape.K * shape.N, shape.M * shape.N
    host = 4 * (ab + mn) + 8 * mn + 8 * ab + 6 * 8 * mn  # the references are made before the upload
    device = 4 * (ab + 2 * mn) + 4 * 8 * mn + 4 * (ab + mn) + 8 * mn
    return float(host), float(device)


# -- in YAML --------------------------------------------------------------------------------------
def mnk(path: Path, node, what: str) -> Shape:
    dims = sequence(path, node, what)
    if len(dims) != 3:
        raise fail(path, node, f"{what}: expected [M, N, K], got {len(dims)} values")
    return Shape(*(integer(path, d, what, minimum=1) for d in dims))



def gemm_shapes(path: Path, node) -> list[Shape]:
    """[M, N, K], {set: square|skinny|odd} (configs/shapes.yaml), or {set: mlp, nets: [..], batch: B}."""
    if isinstance(node, yaml.SequenceNode):
        return [mnk(path, node, "shapes")]
    if not isinstance(node, yaml.MappingNode):
        raise fail(path, node, "shapes: expected [M, N, K] or {set: NAME}")
    named = shape_sets()
    keys = mapping(path, node, "shapes", ["set", "nets", "batch"], required=("set",))
    which = string(path, keys["set"][1], "shapes.set", [*named, "mlp"])
    if which != "mlp":
        extra = [k for k in keys if k != "set"]
        if extra:
            raise fail(path, keys[extra[0]][0], f"shapes: {extra[0]!r} applies only to set: mlp")
        return named[which]
    known = nets.load()
    chosen = list(known)
    if "nets" in keys:
        chosen = [str(integer(path, n, "shapes.nets")) if n.tag.endswith(":int") else scalar(path, n, "shapes.nets")
                  for n in sequence(path, keys["nets"][1], "shapes.nets")]
        for n, item in zip(chosen, keys["nets"][1].value):
            if n not in known:
                raise fail(path, item, f"shapes.nets: no net {n!r}; nets: {', '.join(known)}")
    batch = integer(path, keys["batch"][1], "shapes.batch", minimum=1) if "batch" in keys else 256
    return [Shape(m, n, k) for name in chosen for _, m, n, k in known[name].training_gemms(batch)]


def shape_sets(path: Path = paths.CONFIGS / "shapes.yaml") -> dict[str, list[Shape]]:
    top = mapping(path, compose(path), "top level", ["sets"], required=("sets",))
    out = {}
    for name, (_, body) in mapping(path, top["sets"][1], "sets").items():
        out[name] = [s for item in sequence(path, body, f"sets.{name}") for s in gemm_shapes(path, item)]
    return out


