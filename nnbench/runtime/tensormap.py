"""Tensor maps for Hopper's bulk tensor copies (TMA): cuTensorMapEncodeTiled through ctypes on libcuda.

A tensor map is 128 opaque bytes that describe a global tensor (address, sizes, strides) and the
box one copy moves into shared memory (size, swizzle, zero fill outside the tensor). The host
encodes it once per operand; the kernel takes it by value as a `const __grid_constant__ CUtensorMap`
parameter (see `cuda.RAW_PARAM` for how such a parameter is packed).

The driver refuses some tensors; `tiled_problem` says which, in words, before the driver is asked,
so a caller can take another path (a leading dimension that is not a multiple of 16 bytes is the
common case). Knows nothing about GEMM: dimensions are given innermost first, as the driver takes them.
"""

from __future__ import annotations

import ctypes
from functools import lru_cache

from nnbench.errors import BackendUnavailable, NnbenchError

MAP_BYTES, MAP_ALIGN = 128, 64  # sizeof and alignof(CUtensorMap)
FLOAT32 = 7  # CU_TENSOR_MAP_DATA_TYPE_FLOAT32
ELEMENT_BYTES = {FLOAT32: 4}
SWIZZLE = {0: 0, 32: 1, 64: 2, 128: 3}  # bytes -> CU_TENSOR_MAP_SWIZZLE_*
_L2_PROMOTION_256B = 3
_INTERLEAVE_NONE = 0
_OOB_FILL_ZERO = 0


def tiled_problem(address: int, dims: tuple[int, ...], strides_bytes: tuple[int, ...], box: tuple[int, ...],
                  swizzle_bytes: int = 0, dtype: int = FLOAT32) -> str | None:
    """Why the driver would refuse this tiled map (None if it is valid): cuTensorMapEncodeTiled's
    documented rules for rank <= 5, no interleave. `strides_bytes` has one entry per dimension after
    the first."""
    size = ELEMENT_BYTES[dtype]
    if not 1 <= len(dims) <= 5 or len(strides_bytes) != len(dims) - 1 or len(box) != len(dims):
        return f"a tensor map has 1 to 5 dimensions, with a stride for each but the first; got dims {dims}"
    if address % 16:
        return f"the global address {address:#x} is not 16-byte aligned"
    for i, s in enumerate(strides_bytes):
        if s % 16 or not 0 < s < 2**40:
            return f"dimension {i + 1}'s stride of {s} bytes is not a positive multiple of 16 below 2^40"
    if any(not 0 < d <= 2**32 for d in dims):
        return f"every size must be in 1..2^32, got {dims}"
    if any(not 0 < b <= 256 for b in box):
        return f"every box size must be in 1..256, got {box}"
    if (box[0] * size) % 16:
        return f"the box's inner size ({box[0]} x {size} bytes) is not a multiple of 16 bytes"
    if swizzle_bytes not in SWIZZLE:
        return f"swizzle {swizzle_bytes}: choose from {', '.join(map(str, SWIZZLE))} bytes"
    if swizzle_bytes and box[0] * size > swizzle_bytes:
        return f"the box's inner size ({box[0] * size} bytes) exceeds the {swizzle_bytes}-byte swizzle span"
    return None


@lru_cache(maxsize=1)
def _encoder():
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        fn = lib.cuTensorMapEncodeTiled
    except (OSError, AttributeError) as e:
        raise BackendUnavailable(f"cuTensorMapEncodeTiled is not available from libcuda ({e}): the driver "
                                 "is too old for tensor maps (needs CUDA 12)") from None
    u32, u64, p = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_void_p
    fn.argtypes = [p, ctypes.c_int, u32, p, ctypes.POINTER(u64), ctypes.POINTER(u64), ctypes.POINTER(u32),
                   ctypes.POINTER(u32), ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def encode_tiled(address: int, dims: tuple[int, ...], strides_bytes: tuple[int, ...], box: tuple[int, ...],
                 swizzle_bytes: int = 0, dtype: int = FLOAT32) -> bytes:
    """The 128 bytes of a tiled tensor map (elements outside the tensor read as zero). Raises
    NnbenchError with the rule if the map is invalid; check `tiled_problem` first to fall back."""
    if why := tiled_problem(address, dims, strides_bytes, box, swizzle_bytes, dtype):
        raise NnbenchError(f"tensor map over {dims}: {why}")
    rank = len(dims)
    out = (ctypes.c_uint8 * MAP_BYTES)()
    u64s, u32s = ctypes.c_uint64 * rank, ctypes.c_uint32 * rank
    err = _encoder()(ctypes.addressof(out), dtype, rank, ctypes.c_void_p(address), u64s(*dims),
                     u64s(*strides_bytes, 0), u32s(*box), u32s(*([1] * rank)), _INTERLEAVE_NONE,
                     SWIZZLE[swizzle_bytes], _L2_PROMOTION_256B, _OOB_FILL_ZERO)
    if err:
        raise NnbenchError(f"cuTensorMapEncodeTiled failed with CUresult {err} for dims {dims}, box {box}")
    return bytes(out)
