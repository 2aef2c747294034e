"""runtime/graph.py's capture against a stand-in for libcuda (no GPU here): the capture is always
ended, a graph whose node count is not the launch count is refused, and a driver error is named."""

import ctypes

import pytest

from nnbench.errors import KernelFault
from nnbench.runtime import graph


class FakeDriver:
    """The calls graph.capture makes, recorded; `nodes` is what the 'captured graph' holds."""

    def __init__(self, nodes: int, end_error: int = 0) -> None:
        self.nodes, self.end_error, self.calls = nodes, end_error, []

    def cuStreamBeginCapture_v2(self, stream, mode):
        self.calls.append(("begin", stream.value, mode))
        return 0

    def cuStreamEndCapture(self, stream, out):
        self.calls.append(("end", stream.value))
        out._obj.value = 0x1000
        return self.end_error

    def cuGraphGetNodes(self, g, nodes, count):
        count._obj.value = self.nodes
        return 0

    def cuGraphInstantiateWithFlags(self, out, g, flags):
        self.calls.append(("instantiate", g.value))
        out._obj.value = 0x2000
        return 0

    def cuGraphLaunch(self, exe, stream):
        self.calls.append(("launch", exe.value, stream))
        return 0

    def cuGraphDestroy(self, g):
        self.calls.append(("destroy", g.value))
        return 0

    def cuGraphExecDestroy(self, exe):
        self.calls.append(("destroy-exec", exe.value))
        return 0

    def cuGetErrorName(self, err, out):
        out._obj.value = b"CUDA_ERROR_STREAM_CAPTURE_IMPLICIT"
        return 0


def test_a_capture_becomes_one_launch_on_the_default_stream():
    lib = FakeDriver(nodes=3)
    g = graph.capture(0x77, lambda: 3, lib=lib)
    assert g.nodes == 3
    g()
    assert lib.calls[0] == ("begin", 0x77, graph.GLOBAL) and lib.calls[1] == ("end", 0x77)
    assert lib.calls[-1] == ("launch", 0x2000, None)
    g.close()
    assert ("destroy-exec", 0x2000) in lib.calls and ("destroy", 0x1000) in lib.calls


def test_a_graph_missing_a_launch_is_refused():
    lib = FakeDriver(nodes=2)  # one of the three launches did not land in the graph
    with pytest.raises(KernelFault, match="2 nodes for 3 launches"):
        graph.capture(0x77, lambda: 3, lib=lib)
    assert ("destroy", 0x1000) in lib.calls and not any(c[0] == "instantiate" for c in lib.calls)


def test_an_unknown_launch_count_takes_the_graph_as_captured():
    lib = FakeDriver(nodes=5)
    assert graph.capture(0x77, lambda: None, graph.RELAXED, lib=lib).nodes == 5
    assert lib.calls[0] == ("begin", 0x77, graph.RELAXED)


def test_the_capture_ends_when_the_issuer_raises():
    lib = FakeDriver(nodes=0)

    def issue():
        raise RuntimeError("a launch failed")
    with pytest.raises(RuntimeError, match="a launch failed"):
        graph.capture(0x77, issue, lib=lib)
    assert lib.calls[-1] == ("end", 0x77)


def test_a_capture_the_driver_ended_with_an_error_is_named():
    lib = FakeDriver(nodes=1, end_error=904)
    with pytest.raises(KernelFault, match="CUDA_ERROR_STREAM_CAPTURE_IMPLICIT"):
        graph.capture(0x77, lambda: 1, lib=lib)


class StrictDriver(FakeDriver):
    """The fake, refusing what the real driver would misread: every out-parameter must be a pointer to the C
    type of the driver's prototype (CUgraph*, size_t*, CUgraphExec*), or it writes past or short of it."""

    @staticmethod
    def _out(arg, ctype, name):
        obj = getattr(arg, "_obj", getattr(arg, "contents", None))
        if type(obj) is not ctype:
            raise TypeError(f"{name}: wants a pointer to {ctype.__name__}, got {arg!r}")

    def cuStreamEndCapture(self, stream, out):
        self._out(out, ctypes.c_void_p, "cuStreamEndCapture(CUgraph*)")
        return super().cuStreamEndCapture(stream, out)

    def cuGraphGetNodes(self, g, nodes, count):
        self._out(count, ctypes.c_size_t, "cuGraphGetNodes(size_t*)")
        return super().cuGraphGetNodes(g, nodes, count)

    def cuGraphInstantiateWithFlags(self, out, g, flags):
        self._out(out, ctypes.c_void_p, "cuGraphInstantiateWithFlags(CUgraphExec*)")
        return super().cuGraphInstantiateWithFlags(out, g, flags)


def test_capture_passes_out_parameters_of_the_driver_s_c_types():
    """graph.capture hands the driver pointers of the prototypes' widths (a c_int for size_t* would leave the
    node count's upper half to chance on the real driver), and reads the values written through them."""
    assert graph.capture(0x77, lambda: 9, lib=StrictDriver(nodes=9)).nodes == 9
