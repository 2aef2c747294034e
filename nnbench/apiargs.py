"""The Python API's arguments checked before any work: a wrong type or value is one NnbenchError naming the
function, the argument and what it takes, as the CLI's options are one line, never a TypeError,
AttributeError or IndexError from deep inside, and never a value quietly taken (a negative budget, a NaN).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from nnbench.errors import NnbenchError


def config(fn: str, value, specs: bool = False):
    """A config file's path, a dict of its keys (or, for run_sweep, the loaded specs of `load`)."""
    if isinstance(value, str | os.PathLike | dict):
        if isinstance(value, str) and not value.strip():
            raise NnbenchError(f"{fn}(): config '': name a config file")
        return value
    if specs and isinstance(value, list) and value and all(type(s).__name__ == "SweepSpec" for s in value):
        return value
    took = "a config file's path, a dict of its keys" + (" or the list nnbench.load() returns" if specs else "")
    raise NnbenchError(f"{fn}(): config {_show(value)}: expected {took}")


def path(fn: str, name: str, value, optional: bool = False):
    if optional and value is None:
        return None
    if isinstance(value, str | os.PathLike) and str(value).strip():
        return Path(value)
    raise NnbenchError(f"{fn}(): {name} {_show(value)}: expected a file's path")


def baseline(fn: str, value):
    """One result file, a folder of them, or a non-empty list of files."""
    if isinstance(value, list | tuple):
        if not value:
            raise NnbenchError(f"{fn}(): baseline []: give at least one result file")
        return [path(fn, "baseline", v) for v in value]
    return path(fn, "baseline", value)


def tolerance(fn: str, value) -> float:
    """A fraction (0.05), or the same as a percentage string ("5%")."""
    if isinstance(value, str) and value.strip().endswith("%"):
        try:
            value = float(value.strip()[:-1]) / 100
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 10:
        raise NnbenchError(f"{fn}(): tolerance {_show(value)}: a fraction, e.g. 0.05 (or \"5%\")")
    return float(value)


def positive(fn: str, name: str, value, optional: bool = True) -> float | None:
    """A finite number > 0 (seconds), or None."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise NnbenchError(f"{fn}(): {name} {_show(value)}: expected a number of seconds > 0")
    return value


def count(fn: str, name: str, value, minimum: int, optional: bool = True, maximum: int | None = None) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum or (maximum and value > maximum):
        within = f"in {minimum}..{maximum}" if maximum else f">= {minimum}"
        raise NnbenchError(f"{fn}(): {name} {_show(value)}: expected an integer {within}")
    return value


def flag(fn: str, name: str, value) -> bool:
    """True or False: a truthy string such as "no" would silently mean yes."""
    if not isinstance(value, bool):
        raise NnbenchError(f"{fn}(): {name} {_show(value)}: expected True or False")
    return value


def callback(fn: str, name: str, value):
    if value is not None and not callable(value):
        raise NnbenchError(f"{fn}(): {name} {_show(value)}: expected a function (or None)")
    return value


def choice(fn: str, name: str, value, choices: tuple[str, ...]):
    if value is not None and value not in choices:
        raise NnbenchError(f"{fn}(): {name} {_show(value)}: expected one of {', '.join(choices)} (or None)")
    return value


MAX_DEPTH = 50  # a declaration nests a few levels; a deeper one is a mistake (or a bomb), refused before recursing


def plain(fn: str, value, where: str = "config", depth: int = 0, callables: tuple[str, ...] = ()) -> None:
    """A declaration given as Python values holds only what a YAML file could: text, numbers, booleans, None,
    lists and dicts with text keys (and a callable where `callables` names the key)."""
    if depth > MAX_DEPTH:
        raise NnbenchError(f"{fn}(): {where.split('.')[0]}: nested more than {MAX_DEPTH} levels deep")
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise NnbenchError(f"{fn}(): {where}: key {_show(k)}: expected text")
            if not (k in callables and callable(v)):
                plain(fn, v, f"{where}.{k}" if where != "config" else k, depth + 1)
    elif isinstance(value, list | tuple):
        for v in value:
            plain(fn, v, where, depth + 1)
    elif not (value is None or isinstance(value, str | int | float | bool)):
        raise NnbenchError(f"{fn}(): {where} {_show(value)}: expected text, a number, a list or a dict")


def names(fn: str, name: str, value) -> list[str] | None:
    """Variant names: a list of them, or one name."""
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    try:
        out = list(value)
    except TypeError:
        out = None
    if out is None or not all(isinstance(v, str) for v in out):
        raise NnbenchError(f"{fn}(): {name} {_show(value)}: expected a list of variant names")
    return out


def params(fn: str, value) -> dict | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise NnbenchError(f"{fn}(): params {_show(value)}: expected a dict of parameter values, e.g. "
                           "{'BLOCK': 256}")
    return value


def problems(fn: str, value) -> list[dict] | None:
    if value is None:
        return None
    if not isinstance(value, list | tuple) or not value or not all(isinstance(p, dict) for p in value):
        raise NnbenchError(f"{fn}(): problems {_show(value)}: expected a non-empty list of dicts, e.g. "
                           "[{'N': 4097}]")
    return list(value)


def gpus(fn: str, value) -> list[int] | None:
    if value is None:
        return None
    if not isinstance(value, list | tuple) or not value or not all(
            isinstance(g, int) and not isinstance(g, bool) and g >= 0 for g in value):
        raise NnbenchError(f"{fn}(): gpus {_show(value)}: expected a non-empty list of GPU indices (integers >= 0)")
    return list(value)


def device(fn: str, backend, index) -> None:
    """A GPU index; one other than 0 with the cpu backend named is refused (it runs on no GPU)."""
    count(fn, "device", index, 0, optional=False)
    if backend == "cpu" and index:
        raise NnbenchError(f"{fn}(): device {index}: the cpu backend runs on no GPU; leave device out, or use "
                           "backend=\"cuda\"")


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
