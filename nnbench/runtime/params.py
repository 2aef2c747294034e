"""Kernel parameter layouts: the struct format that packs a launch's arguments as the CUDA ABI lays
them out, raw by-value structs included.

A signature is a string of Python struct codes, one per parameter ("iiifPPfP"), in which a raw
parameter is written `{SIZE@ALIGN}`: SIZE bytes passed by value, starting at a multiple of ALIGN
(a `const __grid_constant__ CUtensorMap` is `{128@64}`, its argument 128 bytes). Struct codes keep
their native alignment; a raw parameter gets explicit pad bytes, which native packing would not add
for a byte string. Knows nothing about any kernel.
"""

from __future__ import annotations

import re
import struct

from nnbench.errors import NnbenchError

_TOKEN = re.compile(r"\{(\d+)@(\d+)\}|([a-zA-Z?])")


def raw(size: int, align: int) -> str:
    """The signature token of a raw by-value parameter."""
    return f"{{{size}@{align}}}"


def param_format(signature: str) -> str:
    """The native struct format for `signature`, with pad bytes before each raw parameter."""
    fmt, pos = "", 0
    for m in _TOKEN.finditer(signature):
        if m.start() != pos:
            raise NnbenchError(f"kernel signature {signature!r}: cannot read {signature[pos:m.start()]!r}")
        pos = m.end()
        if m.group(3):
            fmt += m.group(3)
            continue
        size, align = int(m.group(1)), int(m.group(2))
        if align < 1 or align & (align - 1):
            raise NnbenchError(f"kernel signature {signature!r}: alignment {align} is not a power of two")
        pad = -struct.calcsize(fmt) % align
        fmt += (f"{pad}x" if pad else "") + f"{size}s"
    if pos != len(signature):
        raise NnbenchError(f"kernel signature {signature!r}: cannot read {signature[pos:]!r}")
    return fmt
