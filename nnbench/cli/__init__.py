"""The command line: one thin module per command. Each parses options, asks the workloads (through the
harness) for records, and renders them; none imports CUDA. `app` holds the group and what every
command shares."""

from nnbench.cli import (  # noqa: F401 - registers commands
    check,
    conv,
    devices,
    gemm,
    history,
    profile,
    report,
    soak,
    sweep,
    train,
)
from nnbench.cli.app import cli, main

__all__ = ["cli", "main"]
