"""The runtime seam (nnbench/runtime/backend.py) on a machine without a GPU: both backends implement every
abstract method, a backend that leaves one out cannot be made, the capability properties answer what the
backend-name tests answered, and the CUDA backend's one launch idiom (bind/launch) makes the PyCUDA calls it
made before, read from a stand-in driver (PyCUDA itself needs a GPU to import here)."""

from __future__ import annotations

import importlib
import inspect
import sys
import types

import numpy as np
import pytest

from nnbench.errors import BackendUnavailable
from nnbench.runtime.backend import HOST_CLOCK, Backend
from nnbench.runtime.cpu import CpuBackend


@pytest.fixture
def cuda_module():
    """nnbench.runtime.cuda imported over a stand-in `pycuda.driver`, and forgotten afterwards, so no other test
    sees the stand-in."""
    names = ("pycuda", "pycuda.driver", "nnbench.runtime.cuda")
    saved = {n: sys.modules.get(n) for n in names}
    runtime = sys.modules["nnbench.runtime"]
    had = runtime.__dict__.get("cuda")
    drv = types.ModuleType("pycuda.driver")
    drv.Error = type("Error", (Exception,), {})
    drv.function_attribute = types.SimpleNamespace(MAX_DYNAMIC_SHARED_SIZE_BYTES="MAX_DYNAMIC_SHARED_SIZE_BYTES")
    pkg = types.ModuleType("pycuda")
    pkg.driver = drv
    sys.modules.update({"pycuda": pkg, "pycuda.driver": drv})
    sys.modules.pop("nnbench.runtime.cuda", None)
    try:
        yield importlib.import_module("nnbench.runtime.cuda")
    finally:
        for n, m in saved.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m
        if had is None:
            runtime.__dict__.pop("cuda", None)
        else:
            runtime.cuda = had


class Function:
    """What the CUDA backend calls on a PyCUDA Function, recorded."""

    def __init__(self) -> None:
        self.calls, self.formats, self.attributes = [], [], {}

    def prepare(self, fmt):
        self.formats.append(fmt)

    def set_attribute(self, attr, value):
        self.attributes[attr] = value

    def prepared_call(self, grid, block, *args, **kw):
        self.calls.append(("prepared", grid, block, args, kw))

    def prepared_async_call(self, grid, block, stream, *args, **kw):
        self.calls.append(("async", grid, block, stream, args, kw))

    def __call__(self, *args, **kw):
        self.calls.append(("inferred", args, kw))


def _kernel(cuda_module):
    from nnbench.runtime.cuda import KernelInfo
    return cuda_module.Kernel(None, Function(), KernelInfo(32, 0, 0, 1024), b"", "k")


def test_both_backends_implement_the_seam(cuda_module):
    for cls in (cuda_module.CudaBackend, CpuBackend):
        assert issubclass(cls, Backend) and not inspect.isabstract(cls), cls.__abstractmethods__
    assert CpuBackend().alloc(16).nbytes == 16  # a method the CPU backend lacked before the seam


def test_a_backend_missing_a_method_cannot_be_made():
    body = {name: getattr(CpuBackend, name) for name in Backend.__abstractmethods__}
    type("Complete", (Backend,), body)()  # every abstract method given: it can be made
    for missing in sorted(Backend.__abstractmethods__):  # planted: one left out
        planted = type("Planted", (Backend,), {n: f for n, f in body.items() if n != missing})
        assert inspect.isabstract(planted)
        with pytest.raises(TypeError, match=missing):
            planted()


def test_the_properties_answer_what_the_name_tests_did(cuda_module):
    # before: `name == "cuda"` chose kernels, vendor rows and the CUDA-event clock; "cpu" the host clock
    for cls in (cuda_module.CudaBackend, CpuBackend):
        gpu = cls.name == "cuda"
        assert (cls.runs_kernels, cls.has_vendor_libs) == (gpu, gpu)
        assert cls.clock_name == ("CUDA events" if gpu else HOST_CLOCK)
    cpu = CpuBackend()
    assert cpu.device is None and cpu.arch is None and cpu.free_memory() is None
    assert not cpu.issued_by_host(lambda: None)


def test_a_backend_without_kernels_says_so_in_one_line():
    cpu = CpuBackend()
    for call in (lambda: cpu.load(None, "gemm"), lambda: cpu.launch(None, (1,), (1,), ()),
                 lambda: cpu.bind(None, (1,), (1,), ())(), lambda: cpu.capture(lambda: None),
                 lambda: cpu.allow_dynamic_smem(None, 1 << 16), lambda: cpu.ptr(np.zeros(1))):
        with pytest.raises(BackendUnavailable, match=r"^--backend cpu: .*--backend cuda") as e:
            call()
        assert "\n" not in str(e.value)


def test_the_default_bind_is_a_launch_with_its_arguments_kept():
    launched = []

    class Recording(CpuBackend):
        def launch(self, kernel, grid, block, args, signature=None, *, smem=0, stream=None):
            launched.append((kernel, grid, block, args, signature, smem, stream))

    run = Recording().bind("k", (2, 1, 1), (32, 1, 1), (1, 2), "ii", smem=64)
    assert launched == []
    run()
    run()
    assert launched == [("k", (2, 1, 1), (32, 1, 1), (1, 2), "ii", 64, None)] * 2


def test_cuda_bind_prepares_once_and_calls_as_before(cuda_module):
    be = cuda_module.CudaBackend.__new__(cuda_module.CudaBackend)  # no driver: the launch logic alone
    k = _kernel(cuda_module)
    args = (np.int32(3), np.intp(0x100))
    first = be.bind(k, (4, np.int64(2)), (128,), args, "iP")
    second = be.bind(k, [4, 2, 1], (128, 1, 1), args, "iP")
    first()
    second()
    assert k.func.formats == ["iP"]  # prepared once for both bound launches, not once per bind
    assert k.func.calls == [("prepared", (4, 2, 1), (128, 1, 1), args, {})] * 2
    assert all(type(d) is int for d in k.func.calls[0][1] + k.func.calls[0][2])  # the driver takes Python ints


def test_cuda_bind_with_dynamic_smem_and_a_stream(cuda_module):
    be = cuda_module.CudaBackend.__new__(cuda_module.CudaBackend)
    k = _kernel(cuda_module)
    be.bind(k, (1, 1, 1), (256, 1, 1), (np.int32(1),), "i", smem=100_000)()
    assert k.func.attributes == {"MAX_DYNAMIC_SHARED_SIZE_BYTES": 100_000}  # raised past the 48 KiB default
    assert k.func.calls[-1] == ("prepared", (1, 1, 1), (256, 1, 1), (np.int32(1),), {"shared_size": 100_000})
    be.launch(k, (1, 1, 1), (256, 1, 1), (np.int32(1),), "i", stream="side")
    assert k.func.calls[-1] == ("async", (1, 1, 1), (256, 1, 1), "side", (np.int32(1),), {"shared_size": 0})
    small = _kernel(cuda_module)
    be.launch(small, (1, 1, 1), (32, 1, 1), (), "", smem=1024)
    assert small.func.attributes == {} and small.func.calls[-1][-1] == {"shared_size": 1024}


def test_cuda_launch_without_a_signature_lets_pycuda_read_the_types(cuda_module):
    """The conv and LeNet launches pass records by value (ConvDims) and device buffers: PyCUDA reads their
    types at each call, as the plain `func(*args, block=, grid=)` calls they replace did."""
    be = cuda_module.CudaBackend.__new__(cuda_module.CudaBackend)
    k = _kernel(cuda_module)
    dims = np.zeros(1, np.dtype([("N", "<i4")]))[0]
    run = be.bind(k, (7, 1, 1), (256, 1, 1), (dims, np.intp(8)))
    run()
    assert k.func.formats == []
    assert k.func.calls == [("inferred", (dims, np.intp(8)),
                             {"block": (256, 1, 1), "grid": (7, 1, 1), "shared": 0, "stream": None})]
