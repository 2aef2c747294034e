"""The runtime seam: compile, load, launch, time, copy. It knows nothing about GEMM or MLPs.

Two backends implement one abstract base class, `backend.Backend` (after Kernel Tuner's backends):
`cuda` (PyCUDA on the device's primary context) and `cpu` (NumPy). `open_backend` picks one; `auto` takes CUDA when it
works and says so when it falls back.
"""

from __future__ import annotations

from nnbench.errors import BackendUnavailable
from nnbench.runtime.device import INSTALL_HINT  # noqa: F401 - where the backends' messages say how to install


def open_backend(name: str, device: int = 0):
    """Return (backend, note); note is a one-line explanation when `auto` fell back to the CPU.
    `name` may carry the GPU as `cuda:N` (how a sweep tells its worker process)."""
    name, _, ordinal = name.partition(":")
    if ordinal.isdigit():
        device = int(ordinal)
    if name == "cpu":
        from nnbench.runtime.cpu import CpuBackend
        return CpuBackend(), None
    if name in ("cuda", "auto"):
        try:
            from nnbench.runtime.cuda import CudaBackend
            return CudaBackend(device), None
        except BackendUnavailable as e:
            if name == "cuda":
                raise BackendUnavailable(f"{e}; or run the NumPy path with --backend cpu") from None
            from nnbench.runtime.cpu import CpuBackend
            return CpuBackend(), f"running the NumPy CPU path, because {e}"
    raise BackendUnavailable(f"--backend {name}: choose from cuda, cpu, auto")


def device_count() -> int:
    """CUDA GPUs on this machine; 0 without PyCUDA or a driver (needs no context)."""
    try:
        from nnbench.runtime.cuda import device_count as count
    except BackendUnavailable:
        return 0
    return count()


def devices() -> list:
    """A DeviceInfo per CUDA GPU (needs no context); BackendUnavailable without PyCUDA or a driver."""
    from nnbench.runtime import cuda
    return [cuda.device_info(cuda.drv.Device(i)) for i in range(cuda.device_count())]
