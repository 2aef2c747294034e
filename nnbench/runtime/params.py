"""Kernel parameter layouts: the struct format that packs a launch's arguments as the CUDA ABI lays
them out, raw by-value structs included.

A signature is a string of Python struct codes, one per parameter ("iiifPPfP"), in which a raw
parameter is written `{SIZE@ALIGN}`: SIZE bytes passed by value (a `const __grid_constant__
CUtensorMap` is `{128@64}`, its argument 128 bytes). Struct codes keep their native alignment.

Where a raw parameter starts is not a rule of the signature: the compiler aligns it in the constant
bank that holds the parameters, which begins at an architecture's own offset (0x210 on sm_90), so a
64-byte-aligned map after 48 bytes of arguments sits at 0x70, not 0x40. The offsets therefore come
from the kernel itself (the driver's cuFuncGetParamInfo, `CudaBackend.param_offsets`), and each
parameter gets the pad bytes that put it there. Knows nothing about any kernel.
"""

from __future__ import annotations

import re
import struct

from nnbench.errors import NnbenchError

_TOKEN = re.compile(r"\{(\d+)@(\d+)\}|([a-zA-Z?])")


def raw(size: int, align: int) -> str:
    """The signature token of a raw by-value parameter."""
    return f"{{{size}@{align}}}"


def has_raw(signature: str) -> bool:
    return "{" in signature


def param_format(signature: str, offsets: list[int] | None = None) -> str:
    """The native struct format for `signature`. With `offsets` (one per parameter, as the kernel
    lays them out), pad bytes put each parameter at its offset; a signature with raw parameters
    needs them (see the module's docstring)."""
    tokens = []
    pos = 0
    for m in _TOKEN.finditer(signature):
        if m.start() != pos:
            raise NnbenchError(f"kernel signature {signature!r}: cannot read {signature[pos:m.start()]!r}")
        pos = m.end()
        if m.group(3):
            tokens.append((m.group(3), struct.calcsize(m.group(3)), 1))
            continue
        size, align = int(m.group(1)), int(m.group(2))
        if align < 1 or align & (align - 1):
            raise NnbenchError(f"kernel signature {signature!r}: alignment {align} is not a power of two")
        tokens.append((f"{size}s", size, align))
    if pos != len(signature):
        raise NnbenchError(f"kernel signature {signature!r}: cannot read {signature[pos:]!r}")
    if offsets is None:
        if has_raw(signature):
            raise NnbenchError(f"kernel signature {signature!r}: raw parameters need the kernel's parameter "
                               "offsets (CudaBackend.param_offsets)")
        return "".join(code for code, _, _ in tokens)
    if len(offsets) != len(tokens):
        raise NnbenchError(f"kernel signature {signature!r} has {len(tokens)} parameters; the kernel has "
                           f"{len(offsets)}")
    fmt = ""
    for (code, size, _), offset in zip(tokens, offsets):
        pad = offset - struct.calcsize(fmt)
        if pad < 0 or struct.calcsize(fmt + f"{pad}x" + code) != offset + size:
            raise NnbenchError(f"kernel signature {signature!r}: parameter {code} cannot start at byte {offset}")
        fmt += (f"{pad}x" if pad else "") + code
    return fmt
