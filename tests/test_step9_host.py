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


def test_raw_params_start_at_their_alignment():
    """gemm(M, N, K, alpha, A, B, beta, C, CUtensorMap a, CUtensorMap b, int paths): the maps are
    64-byte aligned, so after the 48 bytes of the ladder's arguments come 16 pad bytes."""
    fmt = param_format(SIGNATURE + raw(128, 64) * 2 + "i")
    args = (1, 2, 3, 1.0, 0xA, 0xB, 0.0, 0xC, b"a" * 128, b"b" * 128, 3)
    buf = struct.pack(fmt, *args)
    assert buf.index(b"a" * 128) == 64 and buf.index(b"b" * 128) == 192 and len(buf) == 324
    assert param_format("Pi{8@8}") == "Pi4x8s"


def test_bad_signature_is_one_clear_error():
    with pytest.raises(NnbenchError, match="cannot read"):
        param_format("ii{128}")
    with pytest.raises(NnbenchError, match="power of two"):
        param_format("i{128@48}")


def test_tensor_map_rules_pick_the_fallback():
    box = (136, 32)
    assert tiled_problem(0x10000, (4096, 4096), (4096 * 4,), box) is None
    assert "multiple of 16" in tiled_problem(0x10000, (1234, 777), (1234 * 4,), box)  # K = 1234: B falls back
    assert "16-byte aligned" in tiled_problem(0x10004, (4096, 4096), (4096 * 4,), box)
    assert "swizzle span" in tiled_problem(0x10000, (4096, 4096), (4096 * 4,), (64, 128), 128)
    assert tiled_problem(0x10000, (4096, 4096), (4096 * 4,), (32, 128), 128) is None


def test_copy_path_names_the_fallback():
    assert gemm.copy_path(["A", "B"], []) == "TMA"
    assert gemm.copy_path(["A"], ["B"]) == "TMA A, cp.async B (leading dim % 4 != 0)"
    assert gemm.copy_path([], ["A", "B"]) == "cp.async A+B (leading dim % 4 != 0)"


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
