"""Which backend a command runs on, and the one line that says which and why.

The request comes from, in this order: `--backend`, the environment variable NNBENCH_BACKEND, the
`backend:` key of the user's config file ($XDG_CONFIG_HOME/nnbench/config.yaml, else
~/.config/nnbench/config.yaml), else `auto`. `auto` takes cuda where a GPU works and the NumPy CPU
path where none does, so a first command runs on any machine; an explicit `cuda` still refuses
without a GPU, so a CI job that expects one fails instead of timing NumPy.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from nnbench.errors import NnbenchError
from nnbench.runtime.device import NO_GPU_ARCH  # noqa: F401 - re-exported for the commands

CHOICES = ("cuda", "cpu", "auto")
ENV = "NNBENCH_BACKEND"
USER_KEYS = ("backend",)


@dataclass(frozen=True)
class Request:
    name: str  # cuda, cpu or auto
    source: str  # what set it, as the one line shows it: --backend, NNBENCH_BACKEND=cpu, FILE:LINE: backend


def user_config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "nnbench" / "config.yaml"


def requested(option: str | None) -> Request:
    """The backend asked for, and by whom; a bad value is one line naming its source and the choices."""
    if option is not None:
        return Request(option, "--backend")
    env = os.environ.get(ENV)
    if env is not None and env.strip():
        value = env.strip().lower()
        if value not in CHOICES:
            raise NnbenchError(f"{ENV}={env}: choose from {', '.join(CHOICES)}")
        return Request(value, f"{ENV}={value}")
    return _from_user_config(user_config_path()) or Request("auto", "default")


def _from_user_config(path: Path) -> Request | None:
    if not path.is_file():
        return None
    from nnbench import yamlnodes
    root = yamlnodes.compose(path)
    keys = yamlnodes.mapping(path, root, "user config", list(USER_KEYS))
    if "backend" not in keys:
        return None
    key, node = keys["backend"]
    value = yamlnodes.string(path, node, "backend", list(CHOICES))
    return Request(value, f"backend: {value} in {yamlnodes.where(path, key)}")


def chosen_line(request: Request, name: str, no_gpu: str | None = None) -> str | None:
    """'nnbench: backend cpu (no GPU: PyCUDA is not installed)'; None where the user typed --backend cuda
    or cpu (the line would only repeat it)."""
    if request.source == "--backend" and request.name != "auto":
        return None
    if request.name == "auto":
        why = f"no GPU: {no_gpu}" if no_gpu else "auto: a CUDA GPU works"
        hint = f"; {ENV}=cpu or --backend cpu for the NumPy path" if name == "cuda" else ""
        return f"nnbench: backend {name} ({why}{hint})"
    return f"nnbench: backend {name} ({request.source})"


def open_requested(request: Request, device: int = 0):
    """(backend, the one line saying which and why, or None)."""
    from nnbench.runtime import open_backend
    be, no_gpu = open_backend(request.name, device)
    return be, chosen_line(request, be.name, no_gpu)


def resolve_without_context(request: Request) -> tuple[str, str | None]:
    """(cuda or cpu, the line) for a process that must never initialise CUDA itself (a sweep's parent:
    its workers own the GPUs): PyCUDA's import is tried here, the GPU count in a child."""
    if request.name != "auto":
        return request.name, chosen_line(request, request.name)
    try:
        import pycuda.driver  # noqa: F401  (importing does not initialise CUDA)
    except ImportError:
        return "cpu", chosen_line(request, "cpu", "PyCUDA is not installed")
    from nnbench.sweeps.worker import count_gpus
    if count_gpus() == 0:
        return "cpu", chosen_line(request, "cpu", "no CUDA GPU found")
    return "cuda", chosen_line(request, "cuda")
