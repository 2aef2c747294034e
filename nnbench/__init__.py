"""nnbench: benchmark and profile the CUDA kernels behind neural-network training.

The Python API (docs/API.md) is nnbench.api's, re-exported here: `benchmark`, `run_sweep`, `check`, `load`,
(`nnbench.sweeps.sweep` is the module that runs sweeps; `run_sweep` is its entry point)
and `NnbenchError`, the one exception a user's mistake raises.
"""

from nnbench.version import __version__

__all__ = ["benchmark", "run_sweep", "check", "load", "NnbenchError", "__version__"]


def __getattr__(name: str):
    # Imported on first use: `nnbench --help` and the worker should not pay for pandas and the workloads.
    if name in ("benchmark", "run_sweep", "check", "load"):
        from nnbench import api
        return getattr(api, name)
    if name == "NnbenchError":
        from nnbench.errors import NnbenchError
        return NnbenchError
    raise AttributeError(f"module 'nnbench' has no attribute {name!r}")
