"""Ladder step 9's host side, without a GPU: kernel parameters with raw by-value structs laid out as
the CUDA ABI does, the tensor-map rules that choose the fallback path, and the refusal below sm_90."""

import struct

import pytest

from nnbench import registry
from nnbench.errors import NnbenchError
from nnbench.runtime.device import DeviceInfo
from nnbench.runtime.ladder_gemm import SIGNATURE
from nnbench.runtime.params import param_format, raw
from nnbench.runtime.tensormap import tiled_problem
from nnbench.suites import gemm

STEP9 = registry.get("gemm", "tf32x3_wgmma")


def test_raw_params_go_where_the_kernel_reads_them():
    """gemm(M, N, K, alpha, A, B, beta, C, CUtensorMap a, CUtensorMap b, int paths) on sm_90a, with the
    offsets its cubin declares (cuobjdump -elf: KPARAM_INFO): the 64-byte-aligned maps start at 0x70
    and 0xf0, since sm_90's parameter bank begins at 0x210, and `paths` at 0x170."""
    offsets = [0, 4, 8, 12, 16, 24, 32, 40, 0x70, 0xF0, 0x170]
    fmt = param_format(SIGNATURE + raw(128, 64) * 2 + "i", offsets)
    args = (1, 2, 3, 1.0, 0xA, 0xB, 0.0, 0xC, b"a" * 128, b"b" * 128, 3)
    buf = struct.pack(fmt, *args)
    assert buf.index(b"a" * 128) == 0x70 and buf.index(b"b" * 128) == 0xF0 and len(buf) == 0x174
    assert struct.unpack_from("i", buf, 0x170)[0] == 3
    assert param_format("Pi{8@8}", [0, 8, 16]) == "Pi4x8s"
    assert param_format("iiifPPfP") == "iiifPPfP"


def test_bad_signature_is_one_clear_error():
    with pytest.raises(NnbenchError, match="cannot read"):
        param_format("ii{128}")
    with pytest.raises(NnbenchError, match="power of two"):
        param_format("i{128@48}")
    with pytest.raises(NnbenchError, match="need the kernel's parameter offsets"):
        param_format("i{128@64}")
    with pytest.raises(NnbenchError, match="cannot start at byte 2"):
        param_format("i{128@64}", [0, 2])
    with pytest.raises(NnbenchError, match="has 2 parameters; the kernel has 3"):
        param_format("i{128@64}", [0, 64, 192])


def test_tensor_map_rules_pick_the_fallback():
    box = (136, 32)
    assert tiled_problem(0x10000, (4096, 4096), (4096 * 4,), box) is None
    assert "multiple of 16" in tiled_problem(0x10000, (1234, 777), (1234 * 4,), box)  # K = 1234: B falls back
    assert "16-byte aligned" in tiled_problem(0x10004, (4096, 4096), (4096 * 4,), box)
    assert "swizzle span" in tiled_problem(0x10000, (4096, 4096), (4096 * 4,), (64, 128), 128)
    assert tiled_problem(0x10000, (4096, 4096), (4096 * 4,), (32, 128), 128) is None


def test_copy_path_names_the_fallback():
    assert gemm.copy_path([], []) == "TMA"
    assert gemm.copy_path(["B"], []) == "TMA, B via a padded copy (leading dim % 4 != 0)"
    assert gemm.copy_path(["A"], ["B"]) == "TMA, A via a padded copy (leading dim % 4 != 0), cp.async B"
    assert gemm.copy_path([], ["A", "B"]) == "cp.async A+B"


def test_split_k_only_where_tiles_leave_sms_idle():
    assert gemm.split_k(1024, 128, 132) == 1  # 4096^3: the tiles fill the GPU
    assert gemm.split_k(4, 128, 132) == 32  # Net 8's 121 x 500 x 4096 weight gradient: 4 tiles
    assert gemm.split_k(16, 128, 132) == 8
    assert gemm.split_k(56, 39, 132) == 2  # 1000 x 777 x 1234
    assert gemm.split_k(32, 4, 132) == 1  # too little K to share


def _device(cc):
    return DeviceInfo("test GPU", cc, 108, 1410.0, 1215.0, 5120, 40 << 30, 40 << 20, smem_per_block_optin=232448)


def test_below_sm90_step9_is_a_skip_row_and_the_rest_still_plan():
    a100 = _device((8, 0))
    why = STEP9.arch_problem(a100)
    assert why and "sm_90a" in why and "sm_80" in why
    assert STEP9.arch_problem(_device((9, 0))) is None
    cases = gemm.plan([], {}, a100)  # every step: planning never refuses the run for step 9 ...
    assert {"tf32x3", "tf32x3_wgmma", "tf32_wgmma"} <= {c.variant.name for c in cases}
    assert STEP9.device_problems(STEP9.defaults(), a100)[0] == why  # ... a sweep makes it a SKIP row


def test_step9_needs_its_shared_memory():
    h100 = _device((9, 0))
    assert not STEP9.device_problems(STEP9.defaults(), h100)
    deep = dict(STEP9.defaults(), STAGES=6)  # 3xTF32 at 128 x 128: 6 stages need 302 KB
    assert "shared memory" in STEP9.device_problems(deep, h100)[0]
    assert STEP9.target("sm_80") == "sm_90a" and registry.get("gemm", "tf32x3").target("sm_80") == "sm_80"
