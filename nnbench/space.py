"""Parameter spaces: axes as data, their product, and restrictions over it (after Kernel Tuner).

An axis is a name and an ordered tuple of values; the space is the cartesian product of its axes,
walked lazily, so a space of millions of points costs nothing until it is filtered. Restrictions
are `nnbench.expr` expressions (`ts % wpt == 0`, `ts * ts / wpt <= 1024`): parsed, never `eval`ed,
and limited to the axis names plus a few functions. Axis names are matched without regard to case,
so a config may write `ts` for the kernel's `TS`.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path

import yaml

from nnbench import expr
from nnbench.errors import NnbenchError
from nnbench.yamlnodes import fail, integer, mapping, sequence

MAX_AXIS = 4096  # values on one axis: more than any kernel parameter takes
MAX_POINTS = 1_000_000  # points in one variant's product: about a minute of filtering


class SpaceError(NnbenchError):
    pass


class RestrictionError(SpaceError):
    """A restriction failed on a point; `where` is the restriction's own file:line."""

    def __init__(self, restriction: Restriction, message: str) -> None:
        super().__init__(f"{restriction.where}: {message}" if restriction.where else message)
        self.restriction, self.message = restriction, message


def int_range(start: int, stop: int, step: int = 1) -> range:
    """start, start+step, ... up to and including stop (a tuning range names both ends). Lazy, and
    refused past MAX_AXIS values, so `{start: 1, stop: 1000000000000}` costs nothing."""
    if step <= 0:
        raise SpaceError(f"range step must be >= 1, got {step}")
    if stop < start:
        raise SpaceError(f"range stop {stop} is below start {start}")
    values = range(start, stop + 1, step)
    if len(values) > MAX_AXIS:
        raise SpaceError(f"range {start}..{stop} step {step} has {len(values):,} values; at most {MAX_AXIS:,} "
                         "per axis")
    return values


def powers_of_two(lo: int, hi: int) -> tuple[int, ...]:
    """Every power of two in [lo, hi]; both ends must be powers of two themselves."""
    for v in (lo, hi):
        if v < 1 or v & (v - 1):
            raise SpaceError(f"powers of two need power-of-two bounds, got {v}")
    if hi < lo:
        raise SpaceError(f"pow2 upper bound {hi} is below the lower bound {lo}")
    out, v = [], lo
    while v <= hi:
        out.append(v)
        v *= 2
    return tuple(out)


@dataclass(frozen=True)
class Restriction:
    text: str
    where: str = ""  # file:line, for messages

    def names(self) -> set[str]:
        return expr.names(self.text)


def expression_env(point: dict[str, int]) -> dict[str, int]:
    """A point under both spellings of each name (TS and ts), so restrictions can use either."""
    env = dict(point)
    env.update({k.lower(): v for k, v in point.items()})
    return env


def check_names(restriction: Restriction, axis_names: list[str]) -> None:
    """Refuse a restriction that reads a name that is not an axis, before any point is evaluated."""
    known = set(expression_env(dict.fromkeys(axis_names, 0)))
    unknown = sorted(restriction.names() - known)
    if unknown:
        where = f"{restriction.where}: " if restriction.where else ""
        raise SpaceError(f"{where}restriction {restriction.text!r} uses {', '.join(unknown)}; "
                         f"allowed names: {', '.join(axis_names)} (either case)")


@dataclass
class Expansion:
    points: list[dict[str, int]]
    total: int  # the full product
    restricted: int  # points a restriction excluded


def expand(axes: dict[str, tuple[int, ...]], restrictions: list[Restriction] = ()) -> Expansion:
    """Every point of the product that satisfies all restrictions, in axis order. A restriction
    that fails on a point (log2(0), a division by zero) raises RestrictionError at its own line."""
    for r in restrictions:
        try:
            expr.parse(r.text)
            expr.check_condition(r.text)
        except expr.ExprError as e:
            raise RestrictionError(r, str(e)) from None
        check_names(r, list(axes))
    size = math.prod(len(v) for v in axes.values())
    if size > MAX_POINTS:
        raise SpaceError(f"the axes' product has {size:,} points; at most {MAX_POINTS:,} (narrow an axis)")
    names = list(axes)
    kept, total = [], 0
    for values in itertools.product(*axes.values()):
        total += 1
        point = dict(zip(names, values))
        env = expression_env(point)
        if all(_holds(r, env) for r in restrictions):
            kept.append(point)
    return Expansion(kept, total, total - len(kept))


def _holds(r: Restriction, env: dict) -> bool:
    try:
        return bool(expr.evaluate(r.text, env))
    except expr.ExprError as e:
        raise RestrictionError(r, f"restriction {e}") from None


# -- an axis in YAML (sweep configs and kernel configs) ----------------------------------------
AXIS_FORMS = "a value, a list, {start, stop, step} or {pow2: [lo, hi]}"


def axis_values(path: Path, node, what: str) -> list[tuple[int, yaml.Node]]:
    """An axis's values, each with the node to blame in an error."""
    if isinstance(node, yaml.ScalarNode):
        return [(integer(path, node, what), node)]
    if isinstance(node, yaml.SequenceNode):
        if not node.value:
            raise fail(path, node, f"{what}: the list is empty")
        return [(integer(path, n, what), n) for n in node.value]
    keys = mapping(path, node, what, ["start", "stop", "step", "pow2"])
    try:
        if "pow2" in keys:
            if len(keys) > 1:
                raise fail(path, node, f"{what}: pow2 stands alone; write {{pow2: [lo, hi]}}")
            bounds = sequence(path, keys["pow2"][1], f"{what}.pow2")
            if len(bounds) != 2:
                raise fail(path, keys["pow2"][1], f"{what}.pow2: expected [lo, hi]")
            vals = powers_of_two(*(integer(path, b, f"{what}.pow2", minimum=1) for b in bounds))
        else:
            if "start" not in keys or "stop" not in keys:
                raise fail(path, node, f"{what}: expected {AXIS_FORMS}")
            step = integer(path, keys["step"][1], f"{what}.step", minimum=1) if "step" in keys else 1
            vals = int_range(integer(path, keys["start"][1], f"{what}.start"),
                                   integer(path, keys["stop"][1], f"{what}.stop"), step)
    except SpaceError as e:
        raise fail(path, node, f"{what}: {e}") from None
    return [(v, node) for v in vals]
