"""Workloads: what to run, its reference, and its metrics, each behind the contract of
`nnbench.suites.base`. This table is the one place that names them; everything generic (sweeps,
the gate, profile, reports, the commands' record loop) looks a workload up here by name."""

from __future__ import annotations

from importlib import import_module

from nnbench.errors import NnbenchError

# name -> the module that defines its Workload subclass as `WORKLOAD`
WORKLOADS = {
    "gemm": "nnbench.suites.gemm",
    "train": "nnbench.suites.train",
    "conv": "nnbench.suites.conv",
    "kernel": "nnbench.suites.kernel",  # a user's own .cu file, declared in YAML
}


def workload(name: str):
    if name not in WORKLOADS:
        raise NnbenchError(f"suite {name!r}: unknown; choose from {', '.join(WORKLOADS)}")
    return import_module(WORKLOADS[name]).WORKLOAD


def session_for(suite: str, backend, settings, rtol: float, seed: int, env: dict):
    return workload(suite).session(backend, settings, rtol, seed, env)
