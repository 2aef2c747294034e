"""CUDA graphs through ctypes on libcuda: capture what a callable enqueues, replay it with one launch.

The staged PyCUDA (2026.1) has no graph or stream-capture API, so this module calls the driver
directly, as tensormap.py does for tensor maps. A capture runs on a stream of its own: the caller
(the backend) routes its launches there while `capture` records them, then the graph is instantiated
once and each replay is one cuGraphLaunch on the legacy default stream, where nnbench's events, its
blocking kernel and every uncaptured launch also run, so `measure` times a replay like any launch.

The capture stream is created blocking (not CU_STREAM_NON_BLOCKING): work that strays onto the legacy
stream while it captures then depends on it implicitly, which the driver refuses and which ends the
capture with an error. A launch that escaped the capture would otherwise run once, outside the graph,
and be missing from every replay. Knows nothing about PyCUDA or any workload.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from functools import lru_cache

from nnbench.errors import BackendUnavailable, KernelFault

GLOBAL, RELAXED = 0, 2  # CUstreamCaptureMode: GLOBAL refuses unsafe calls (allocation, syncs) while capturing
LEGACY_STREAM = None  # the NULL stream: PyCUDA's default, where events and uncaptured launches go


@lru_cache(maxsize=1)
def driver():
    """libcuda with the argument types of the graph calls; BackendUnavailable if the driver lacks them."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        p, pp, u64 = ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_ulonglong
        sigs = {
            "cuStreamBeginCapture_v2": [p, ctypes.c_int],
            "cuStreamEndCapture": [p, pp],
            "cuGraphInstantiateWithFlags": [pp, p, u64],
            "cuGraphLaunch": [p, p],
            "cuGraphGetNodes": [p, p, ctypes.POINTER(ctypes.c_size_t)],
            "cuGraphExecDestroy": [p],
            "cuGraphDestroy": [p],
            "cuGetErrorName": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
        }
        for name, args in sigs.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, ctypes.c_int
    except (OSError, AttributeError) as e:
        raise BackendUnavailable(f"CUDA graphs need libcuda with stream capture (CUDA 11.4 or newer): {e}") from None
    return lib


def _check(lib, err: int, what: str) -> None:
    if err:
        name = ctypes.c_char_p()
        lib.cuGetErrorName(err, ctypes.byref(name))
        raise KernelFault(f"{what} failed: {(name.value or b'CUresult %d' % err).decode()}")


class Graph:
    """An instantiated graph: calling it enqueues one replay on the legacy default stream."""

    def __init__(self, lib, graph: ctypes.c_void_p, exe: ctypes.c_void_p, nodes: int) -> None:
        self.lib, self._graph, self._exec, self.nodes = lib, graph, exe, nodes

    def __call__(self) -> None:
        _check(self.lib, self.lib.cuGraphLaunch(self._exec, LEGACY_STREAM), "cuGraphLaunch")

    def close(self) -> None:
        if self._exec is not None:
            self.lib.cuGraphExecDestroy(self._exec)
            self.lib.cuGraphDestroy(self._graph)
            self._exec = self._graph = None

    def __del__(self) -> None:  # the context may be gone at interpreter exit: nothing to report then
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass


def capture(stream: int, issue: Callable[[], int | None], mode: int = GLOBAL, lib=None) -> Graph:
    """Record on `stream` (a CUstream handle) what `issue()` enqueues there, and instantiate it.
    `issue` returns how many kernels it launched, or None if it cannot tell (a library's calls): a
    graph with another number of nodes is refused, since a launch missing from it would go missing
    from every replay. The capture is always ended, also when `issue` raises."""
    lib = lib or driver()
    handle = ctypes.c_void_p(stream)
    _check(lib, lib.cuStreamBeginCapture_v2(handle, mode), "cuStreamBeginCapture")
    graph = ctypes.c_void_p()
    try:
        launched = issue()
    finally:
        ended = lib.cuStreamEndCapture(handle, ctypes.byref(graph))
    _check(lib, ended, "cuStreamEndCapture (a launch strayed off the capture stream, or a call synchronized)")
    count = ctypes.c_size_t()
    _check(lib, lib.cuGraphGetNodes(graph, None, ctypes.byref(count)), "cuGraphGetNodes")
    if launched is not None and count.value != launched:
        lib.cuGraphDestroy(graph)
        raise KernelFault(f"the captured graph has {count.value} nodes for {launched} launches")
    exe = ctypes.c_void_p()
    err = lib.cuGraphInstantiateWithFlags(ctypes.byref(exe), graph, 0)
    if err:
        lib.cuGraphDestroy(graph)
    _check(lib, err, "cuGraphInstantiateWithFlags")
    return Graph(lib, graph, exe, count.value)
