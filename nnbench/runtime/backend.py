"""The seam every backend implements (after Kernel Tuner's `backends/backend.py`): memory, kernels, launches,
verification and timing, so that workloads, `measure` and the commands never ask which backend they hold.

What a caller would otherwise learn by testing the backend's name is a property: `runs_kernels` (it loads and
launches compiled CUDA kernels on a device with memory of its own), `has_vendor_libs` (cuBLAS, cuDNN, PyTorch and
NCCL baselines may be tried), `clock_name` (what times the samples, for a table's title), `device` and `arch`.
`name` is for display and records only.

What every backend must do is abstract. What a backend without kernels cannot do (load, launch, constant banks,
dynamic shared memory, occupancy, graphs) has a default here that says so in one line.

One launch idiom: `launch(kernel, grid, block, args, signature, smem=, stream=)` runs a kernel once, and
`bind(...)`, with the same arguments, returns the no-argument callable that `measure` times and graphs capture.
`signature` (struct codes, `runtime/params.py`) lets a backend pack the arguments once; without it the backend
reads their types from the arguments themselves (NumPy scalars, device pointers, records passed by value).
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

import numpy as np

from nnbench.errors import BackendUnavailable

HOST_CLOCK = "host clock"  # a backend that times with perf_counter around its calls


class Backend(ABC):
    # -- what this backend is (class attributes in a subclass satisfy these) ---------------------
    @property
    @abstractmethod
    def name(self) -> str:
        """For display and records ("cuda", "cpu"); never a capability test: ask the properties below."""

    @property
    @abstractmethod
    def runs_kernels(self) -> bool:
        """Whether it compiles, loads and launches CUDA kernels on a device with memory of its own."""

    @property
    @abstractmethod
    def has_vendor_libs(self) -> bool:
        """Whether the vendor baselines (cuBLAS, cuDNN, PyTorch, NCCL) may be tried on its buffers."""

    @property
    @abstractmethod
    def clock_name(self) -> str:
        """What times the samples, as a table's title says it ("CUDA events", "host clock")."""

    @property
    @abstractmethod
    def device(self):
        """The DeviceInfo (peaks, limits, occupancy), or None without a GPU."""

    @property
    @abstractmethod
    def arch(self) -> str | None:
        """The nvcc target (sm_90), or None without a GPU."""

    @abstractmethod
    def environment(self) -> dict:
        """The record's environment columns (results.ENV_FIELDS)."""

    # -- memory --------------------------------------------------------------------------------
    @abstractmethod
    def alloc(self, nbytes: int):
        """An uninitialised buffer of `nbytes`."""

    @abstractmethod
    def upload(self, host: np.ndarray):
        """A new buffer holding a copy of `host`."""

    @abstractmethod
    def write(self, buf, host: np.ndarray) -> None:
        """Overwrite `buf` with `host`."""

    @abstractmethod
    def download(self, buf, like: np.ndarray) -> np.ndarray:
        """A host copy of `buf`, shaped and typed as `like`."""

    @abstractmethod
    def fill_nan(self, buf, count: int) -> None:
        """Poison `count` float32s of `buf` with NaN, so an element a kernel never writes fails the check."""

    @abstractmethod
    def copy(self, dst, src, nbytes: int) -> None:
        """Copy `nbytes` from buffer (or symbol address) `src` to `dst`, on the device."""

    def ptr(self, buf) -> int:
        """A buffer's device address, for a kernel's pointer argument."""
        raise self._no_kernels("device pointers")

    def free_memory(self) -> int | None:
        """Device bytes free now, or None where the buffers live in host memory (memory.require checks that)."""
        return None

    @abstractmethod
    def synchronize(self) -> None:
        """Wait for everything queued; a kernel fault surfaces here as KernelFault."""

    # -- verification (the norms of nnbench.measure, computed where the buffers live) ------------
    @abstractmethod
    def rel_err(self, out, ref, count: int) -> float:
        """||out - ref|| / ||ref|| of a float32 output against a float64 reference."""

    @abstractmethod
    def conditioned_error(self, out, ref, magnitude, count: int) -> float:
        """measure.conditioned_error of a float32 output against a float64 reference and its magnitudes."""

    # -- kernels and launches ------------------------------------------------------------------
    def load(self, compiled, name: str):
        """Kernel `name` of a compiled module (runtime.compile's Compiled)."""
        raise self._no_kernels("kernels")

    def symbol(self, kernel, name: str) -> int:
        """The device address of a module's global (a `__constant__` bank), for `copy` to fill."""
        raise self._no_kernels("constant memory")

    def allow_dynamic_smem(self, kernel, nbytes: int) -> None:
        """Let launches of `kernel` ask for `nbytes` of dynamic shared memory (above 48 KiB needs this)."""
        raise self._no_kernels("shared memory")

    def occupancy(self, kernel, threads: int, dynamic_smem: int = 0):
        """Blocks per SM and what limits them (runtime.device.Occupancy) for `kernel` at `threads` a block."""
        raise self._no_kernels("occupancy")

    def launch(self, kernel, grid: Sequence[int], block: Sequence[int], args: tuple, signature: str | None = None,
               *, smem: int = 0, stream=None) -> None:
        """Launch `kernel` once on `grid` x `block` with `args`; `smem`: dynamic shared memory in bytes (raised
        past the default limit where it asks for more); `stream`: a stream of the backend's own (a data-parallel
        step's side stream) instead of the default one."""
        raise self._no_kernels("kernel launches")

    def bind(self, kernel, grid: Sequence[int], block: Sequence[int], args: tuple, signature: str | None = None,
             *, smem: int = 0, stream=None) -> Callable[[], None]:
        """`launch` with these arguments as a no-argument callable, for `measure` to time and graphs to capture.
        A backend overrides this where it can do the per-launch work once (the CUDA backend's prepared calls)."""
        return functools.partial(self.launch, kernel, grid, block, args, signature, smem=smem, stream=stream)

    def capture(self, fn: Callable[[], None], streams=()):
        """`fn`'s launches as one graph, replayed by calling the result."""
        raise self._no_kernels("graphs")

    def prime(self) -> None:  # noqa: B027 - a hook: most backends have nothing to load ahead
        """Load the helpers every case uses before the first case (a sweep's worker calls it while its parent
        compiles); nothing to do where there are none."""

    # -- timing --------------------------------------------------------------------------------
    @abstractmethod
    def timed(self, fn: Callable[[], None], reps: int, during=None) -> float:
        """Milliseconds per call over `reps` back-to-back calls of `fn`; `during()` (an NVML probe) is called
        while they run."""

    @abstractmethod
    def timed_samples(self, fn: Callable[[], None], reps: int, count: int, during=None,
                      collective: bool = False) -> list[float]:
        """`count` samples of `reps` calls each, in milliseconds per call. `collective`: `fn` holds a
        collective that other ranks must match call for call, so a backend that would time it alone to
        learn why a batch went wrong must not: it raises QueueFull instead (measure.measure_collective)."""

    def issued_by_host(self, fn) -> bool:
        """Whether `fn`'s samples fell back to being issued by the host one by one (a launch that synchronizes
        inside); a backend that times on the host issues every sample so and reports it by its clock."""
        return False

    @abstractmethod
    def flush_l2(self) -> None:
        """Evict the operands from the last-level cache, so the next call starts cold."""

    @abstractmethod
    def sm_clock_mhz(self) -> float | None:
        """The SM clock now, or None where it cannot be read."""

    @abstractmethod
    def telemetry(self):
        """NVML's view for one `measure` call (runtime/nvml.py), or None."""

    def _no_kernels(self, what: str) -> BackendUnavailable:
        return BackendUnavailable(f"--backend {self.name}: no {what} here, since it runs no CUDA kernels; choose "
                                  "--backend cuda on a machine with a GPU")
