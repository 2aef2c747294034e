"""Where the project's non-Python files live (kernels, configs, results, the cubin cache)."""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "kernels_cu"
CONFIGS = ROOT / "configs"
RESULTS = ROOT / "results"


def cache_dir() -> Path:
    """The content-addressed cubin cache; NNBENCH_CACHE overrides it (tests use a temp dir)."""
    env = os.environ.get("NNBENCH_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or (Path.home() / ".cache")
    return Path(base) / "nnbench" / "cubin"
