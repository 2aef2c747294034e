"""The driver's parameter offsets (nnbench/runtime/params.py `driver_offsets`) against a stand-in libcuda: no
cuFuncGetParamInfo call asks for an index past the last parameter (such a call fails, and compute-sanitizer's
memcheck reports the failure as the case's error: it did on every step-9 case on an H200 with driver 580, which
has no cuFuncGetParamCount), with the count from the driver or, without it, from the signature; and a signature
with another count of parameters than the kernel's is still refused."""

from __future__ import annotations

import ctypes

import pytest

from nnbench.errors import NnbenchError
from nnbench.runtime.params import driver_offsets, param_count, param_format, raw

CUDA_ERROR_INVALID_VALUE = 1
# A step-9 kernel's layout as sm_90 lays it out: three ints, then a 64-byte-aligned tensor map (params.py)
OFFSETS = [0, 4, 8, 64]
SIZES = [4, 4, 4, 128]


class FakeCuda:
    """libcuda's few functions that driver_offsets calls, taking the same ctypes arguments (a byref's object is
    its `_obj`); every cuFuncGetParamInfo index asked is kept in `asked`."""

    def __init__(self, offsets: list[int], sizes: list[int], with_count: bool = True) -> None:
        self.offsets, self.sizes, self.asked, self.unloaded = offsets, sizes, [], False
        if with_count:
            self.cuFuncGetParamCount = self._count

    def cuModuleLoadData(self, module, image) -> int:
        module._obj.value = 0x1000
        return 0

    def cuModuleGetFunction(self, func, module, name: bytes) -> int:
        func._obj.value = 0x2000
        return 0

    def cuModuleUnload(self, module) -> int:
        self.unloaded = True
        return 0

    def _count(self, func, count) -> int:
        count._obj.value = len(self.offsets)
        return 0

    def cuFuncGetParamInfo(self, func, index: ctypes.c_size_t, offset, size) -> int:
        self.asked.append(index.value)
        if index.value >= len(self.offsets):
            return CUDA_ERROR_INVALID_VALUE
        offset._obj.value, size._obj.value = self.offsets[index.value], self.sizes[index.value]
        return 0


def test_with_the_count_no_index_past_the_last_parameter_is_asked():
    lib = FakeCuda(OFFSETS, SIZES)
    assert driver_offsets(b"cubin", "sgemm_step9", 4, lib) == OFFSETS
    assert lib.asked == list(range(len(OFFSETS)))  # each index once, none a failed call
    assert lib.unloaded


def test_without_the_count_only_the_declared_indices_are_asked():
    lib = FakeCuda(OFFSETS, SIZES, with_count=False)
    assert driver_offsets(b"cubin", "sgemm_step9", 4, lib) == OFFSETS
    assert lib.asked == list(range(len(OFFSETS)))  # no probe past the last parameter: no failed call
    assert lib.unloaded


@pytest.mark.parametrize("with_count", [True, False])
def test_a_signature_with_another_count_of_parameters_than_the_kernel_is_refused(with_count):
    offsets = driver_offsets(b"cubin", "sgemm_step9", 4, FakeCuda(OFFSETS, SIZES, with_count))
    assert param_format("iii" + raw(128, 64), offsets) == "iii52x128s"
    with pytest.raises(NnbenchError, match="has 5 parameters; the kernel has 4"):
        lib = FakeCuda(OFFSETS, SIZES, with_count)
        param_format("iiii" + raw(128, 64), driver_offsets(b"cubin", "sgemm_step9", 5, lib))
    assert param_count("iiii" + raw(128, 64)) == 5
