"""Workloads: one package each (`gemm`, `train`, `conv`, `kernel`), behind the contract of
`nnbench.workloads.base`. Each package holds its variants (`variants.py`, the registry rows), its
problem, its launches, its float64 reference and its session (`session.py`, which exports the
`Workload` as `WORKLOAD`). No workload imports another.

`WORKLOADS` is the one place that names them: everything generic (the harness, sweeps, the gate,
profile, reports, the commands) looks a workload and its variants up here, by name. Adding a
workload is one line here; the packages are imported only when asked for.
"""

from __future__ import annotations

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


def suite_variants(suite: str, backend: str | None = None) -> list[Variant]:
    """The variants of one registry suite (a workload's family: `conv-backward` within `conv`)."""
    return registry.of_suite(all_variants(), suite, backend)


def get(suite: str, name: str) -> Variant:
    return registry.find(all_variants(), suite, name)


def all_param_names(suite: str) -> list[Param]:
    return registry.param_union(suite_variants(suite))
