"""Option types that refuse what click's own types let through: NaN, infinity, a negative seed, an
empty name. Every numeric option of every command uses one of these, so `--budget nan`,
`--rate inf` and `--seed -1` are one line and exit 2 wherever they are given.
"""

from __future__ import annotations

import math

import click

SEED_MAX = 2**32 - 1  # NumPy's legacy seeding and the CSV's seed column take 32 bits


class Finite(click.ParamType):
    """A finite float, optionally bounded: `Finite(0, open_low=True)` is a positive number."""

    name = "NUMBER"

    def __init__(self, low: float | None = None, high: float | None = None, open_low: bool = False,
                 open_high: bool = False) -> None:
        self.low, self.high, self.open_low, self.open_high = low, high, open_low, open_high

    def convert(self, value, param, ctx):
        if isinstance(value, float) and math.isfinite(value):
            v = value
        else:
            try:
                v = float(str(value).strip())
            except ValueError:
                _refuse(param, value, f"not a number; give a number {self.allowed()}", ctx)
            if not math.isfinite(v):
                _refuse(param, value, f"not a finite number; give a number {self.allowed()}", ctx)
        low_bad = self.low is not None and (v < self.low or (self.open_low and v == self.low))
        high_bad = self.high is not None and (v > self.high or (self.open_high and v == self.high))
        if low_bad or high_bad:
            _refuse(param, value, f"must be {self.allowed()}", ctx)
        return v

    def allowed(self) -> str:
        if self.high is None:
            return "" if self.low is None else f"{'>' if self.open_low else '>='} {self.low:g}"
        if self.low is None:
            return f"{'<' if self.open_high else '<='} {self.high:g}"
        return f"in {'(' if self.open_low else '['}{self.low:g}, {self.high:g}{')' if self.open_high else ']'}"

    def __repr__(self) -> str:
        return f"Finite({self.low}, {self.high})"


POSITIVE = Finite(0.0, open_low=True)
NON_NEGATIVE = Finite(0.0)


class Seed(click.ParamType):
    """A seed in [0, 2**32): NumPy refuses a negative one with a traceback, far from the option."""

    name = "SEED"

    def convert(self, value, param, ctx):
        try:
            v = int(str(value).strip(), 10)
        except ValueError:
            _refuse(param, value, f"not an integer; give one in [0, {SEED_MAX}]", ctx)
        if not 0 <= v <= SEED_MAX:
            _refuse(param, value, f"must be in [0, {SEED_MAX}]", ctx)
        return v


SEED = Seed()


class Name(click.ParamType):
    """A non-empty name (a net, a kernel): `--net ''` is refused, never read as 'the default'."""

    name = "NAME"

    def convert(self, value, param, ctx):
        text = str(value).strip()
        if not text:
            _refuse(param, repr(str(value)), "an empty name; give one", ctx)
        return text


class Counts(click.ParamType):
    """A count, or a comma-separated list of counts (`--gpus 1,2,4`), each >= 1: sorted, each once."""

    name = "N[,N...]"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        try:
            counts = tuple(sorted({int(x) for x in str(value).split(",")}))
        except ValueError:
            _refuse(param, value, "expected a count or comma-separated counts, e.g. 2 or 1,2,4", ctx)
        if min(counts) < 1:
            _refuse(param, value, "every count must be >= 1", ctx)
        return counts


def _refuse(param, value, why: str, ctx):
    """`--rate inf: not a finite number; ...`: the project's one-line form, option and value first."""
    opt = param.opts[0] if param is not None and param.opts else "value"
    raise click.UsageError(f"{opt} {value}: {why}", ctx)


NAME = Name()


def exclusive(ctx_params: dict, *names: str) -> None:
    """Refuse flags that cannot go together, rather than silently ignoring one of them."""
    given = [n for n in names if ctx_params.get(n.lstrip("-").replace("-", "_"))]
    if len(given) > 1:
        raise click.UsageError(f"{' and '.join(given)} are exclusive: give one of them")
