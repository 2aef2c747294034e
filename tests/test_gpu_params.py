"""On the GPU: a launch whose signature holds by-value structs (step 9's tensor maps) puts every
argument where the kernel reads it. A kernel with step 9's parameter list echoes what it received."""

import struct

import numpy as np
import pytest

from nnbench.runtime.compile import CompileRequest, compile_cubin
from nnbench.runtime.ladder_gemm import SIGNATURE
from nnbench.runtime.params import raw

pytestmark = pytest.mark.gpu

ECHO = r"""
#include <cuda.h>
extern "C" __global__ void gemm(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
                                unsigned long long* C, const __grid_constant__ CUtensorMap a_map,
                                const __grid_constant__ CUtensorMap b_map, int paths) {
    C[0] = M; C[1] = N; C[2] = K; C[3] = __float_as_uint(alpha); C[4] = (unsigned long long)A;
    C[5] = (unsigned long long)B; C[6] = __float_as_uint(beta);
    C[7] = a_map.opaque[0]; C[8] = a_map.opaque[15]; C[9] = b_map.opaque[0]; C[10] = b_map.opaque[15];
    C[11] = paths;
}
"""
SIG = SIGNATURE + raw(128, 64) * 2 + "i"


def _echo(be, tmp_path, prepare=None):
    src = tmp_path / "echo.cu"
    src.write_text(ECHO)
    kernel = be.load(compile_cubin(CompileRequest.make(src, {}, be.arch), cache=tmp_path), "gemm")
    out = be.upload(np.zeros(12, np.uint64))
    a_map, b_map = bytes(range(128)), bytes(range(128, 256))
    args = (np.int32(7), np.int32(9), np.int32(13), np.float32(1.5), 0xA0, 0xB0, np.float32(-2.0), be.ptr(out),
            a_map, b_map, np.int32(3))
    launch = be.bind(kernel, (1, 1, 1), (1, 1, 1), args, SIG)
    if prepare is not None:  # a planted defect: pack with another format
        kernel.func.prepare(prepare)
    launch()
    be.synchronize()
    got = be.download(out, np.zeros(12, np.uint64))
    want = [7, 9, 13, struct.unpack("<I", struct.pack("<f", 1.5))[0], 0xA0, 0xB0,
            struct.unpack("<I", struct.pack("<f", -2.0))[0], *struct.unpack("<Q", a_map[:8]),
            *struct.unpack("<Q", a_map[120:]), *struct.unpack("<Q", b_map[:8]), *struct.unpack("<Q", b_map[120:]), 3]
    return list(map(int, got)), want


def test_by_value_structs_arrive_where_the_kernel_reads_them(cuda_backend, tmp_path):
    got, want = _echo(cuda_backend, tmp_path)
    assert got == want


def test_packing_by_relative_alignment_is_caught(cuda_backend, tmp_path):
    """The layout step 9 first shipped with (maps at a multiple of 64 from the buffer's start, 16 pad
    bytes after the 48 of the ladder's arguments) does not reach the kernel: the maps and `paths`
    arrive shifted, and step 9 silently took its cp.async fallback for every operand."""
    got, want = _echo(cuda_backend, tmp_path, prepare="iiifPPfP16x128s128si")
    assert got[:7] == want[:7] and got[7:] != want[7:]
