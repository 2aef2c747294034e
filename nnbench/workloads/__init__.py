"""Workloads: one package each (`gemm`, `train`, `conv`, `kernel`), behind the contract of
`nnbench.workloads.base`. Each package holds its variants (`variants.py`, the registry rows), its
problem, its launches, its float64 reference and its session (`session.py`, which exports the
`Workload` as `WORKLOAD`). No workload imports another.

`WORKLOADS` is the one place that names them: everything generic (the harness, sweeps, the gate,
profile, reports, the commands) looks a workload and its variants up here, by name. Adding a
workload is one line here; the packages are imported only when asked for.
"""

from __future__ import annotations

import os
from importlib import import_module

from nnbench import registry
from nnbench.errors import NnbenchError
from nnbench.registry import Param, Variant

# name -> its package: `<package>.session.WORKLOAD`, and `<package>.variants.VARIANTS` where the
# workload ships variants of its own (a user's kernel brings them in YAML)
WORKLOADS = {
    "gemm": "nnbench.workloads.gemm",
    "train": "nnbench.workloads.train",
    "conv": "nnbench.workloads.conv",
    "kernel": "nnbench.workloads.kernel",  # a user's own .cu file, declared in YAML
}
# A workload outside nnbench's tree (a lab's own package on the Python path): NNBENCH_WORKLOADS="name=package,...".
# An environment variable, not a call, so that sweep workers (processes of their own) see it too.
EXTRA_ENV = "NNBENCH_WORKLOADS"


def _extra(text: str) -> dict[str, str]:
    out = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, eq, package = (s.strip() for s in item.partition("="))
        if not eq or not name.isidentifier() or not all(p.isidentifier() for p in package.split(".")):
            raise NnbenchError(f"{EXTRA_ENV}: {item!r} is not name=package (e.g. attention=mylab.attention)")
        out[name] = package
    return out


WORKLOADS.update(_extra(os.environ.get(EXTRA_ENV, "")))


def workload(name: str):
    if name not in WORKLOADS:
        raise NnbenchError(f"workload {name!r}: unknown; choose from {', '.join(WORKLOADS)}")
    return import_module(WORKLOADS[name] + ".session").WORKLOAD


def session_for(name: str, backend, settings, rtol: float, seed: int, env: dict):
    return workload(name).session(backend, settings, rtol, seed, env)


def all_variants() -> tuple[Variant, ...]:
    """Every shipped variant of every listed workload, in the table's order."""
    out: list[Variant] = []
    for package in WORKLOADS.values():
        try:
            out.extend(import_module(package + ".variants").VARIANTS)
        except ModuleNotFoundError as e:
            if e.name != package + ".variants":
                raise
    return tuple(out)


def variants_of(workload: str, backend: str | None = None, kinds: tuple[str, ...] | None = None) -> list[Variant]:
    """The shipped variants of one workload, on one backend, of some kinds (`Variant.kind`; None: any)."""
    return registry.of_workload(all_variants(), workload, backend, kinds)


def get(workload: str, name: str) -> Variant:
    return registry.find(all_variants(), workload, name)


def all_param_names(workload: str) -> list[Param]:
    return registry.param_union(variants_of(workload))


def every_param() -> list[Param]:
    """One Param per distinct name across every listed workload's variants (the first declaration's help)."""
    return registry.param_union(v for name in WORKLOADS for v in workload(name).variants())


def every_split() -> dict[str, tuple[str, list[str]]]:
    """The time splits the listed workloads offer (Workload.splits): kind -> (what it splits, the workloads)."""
    out: dict[str, tuple[str, list[str]]] = {}
    for name in WORKLOADS:
        for kind, what in workload(name).splits.items():
            out.setdefault(kind, (what, []))[1].append(name)
    return out
