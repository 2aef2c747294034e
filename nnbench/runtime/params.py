"""Kernel parameter layouts: the struct format that packs a launch's arguments as the CUDA ABI lays
them out, raw by-value structs included.

A signature is a string of Python struct codes, one per parameter ("iiifPPfP"), in which a raw
parameter is written `{SIZE@ALIGN}`: SIZE bytes passed by value (a `const __grid_constant__
CUtensorMap` is `{128@64}`, its argument 128 bytes). Struct codes keep their native alignment.

Where a raw parameter starts is not a rule of the signature: the compiler aligns it in the constant
bank that holds the parameters, which begins at an architecture's own offset (0x210 on sm_90), so a
64-byte-aligned map after 48 bytes of arguments sits at 0x70, not 0x40. The offsets therefore come
from the kernel itself (the driver's cuFuncGetParamInfo, `driver_offsets`), and each
parameter gets the pad bytes that put it there. Knows nothing about any kernel.
"""

from __future__ import annotations

import ctypes
import re
import struct

from nnbench.errors import BackendUnavailable, KernelFault, NnbenchError

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


def param_count(signature: str) -> int:
    """The parameters a signature declares."""
    return len(_TOKEN.findall(signature))


def driver_offsets(cubin: bytes, name: str, declared: int, lib=None) -> list[int]:
    """Where each parameter of kernel `name` in `cubin` starts, as the driver reads it (cuFuncGetParamInfo),
    through ctypes on a second handle to the same cubin (PyCUDA exposes no CUfunction), in the current context.
    `declared`: the parameters its signature declares; `lib`: libcuda, or a stand-in with its functions (tests)."""
    lib = ctypes.CDLL("libcuda.so.1") if lib is None else lib
    if not hasattr(lib, "cuFuncGetParamInfo"):
        raise BackendUnavailable("cuFuncGetParamInfo is missing from libcuda: kernels with by-value structs "
                                 "need a CUDA 12.4 driver or newer")
    module, func = ctypes.c_void_p(), ctypes.c_void_p()
    image = ctypes.create_string_buffer(cubin, len(cubin))
    if lib.cuModuleLoadData(ctypes.byref(module), image) or \
            lib.cuModuleGetFunction(ctypes.byref(func), module, name.encode()):
        raise KernelFault(f"cannot load kernel {name} through the driver API to read its parameter offsets")
    offsets: list[int] = []
    try:
        off, size, count = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_size_t()
        if hasattr(lib, "cuFuncGetParamCount"):  # CUDA 12.9 drivers and newer
            if lib.cuFuncGetParamCount(func, ctypes.byref(count)):
                raise KernelFault(f"cannot read the parameter count of kernel {name} through the driver API")
            for i in range(count.value):
                if lib.cuFuncGetParamInfo(func, ctypes.c_size_t(i), ctypes.byref(off), ctypes.byref(size)):
                    raise KernelFault(f"cannot read parameter {i} of kernel {name} through the driver API")
                offsets.append(off.value)
        else:
            # An older driver (580, CUDA 13.0, has no cuFuncGetParamCount) tells the count only by refusing the
            # first index past the last parameter, and that refusal is a failed API call which compute-sanitizer's
            # memcheck reports as the case's error (it did on every step-9 case on an H200). So only the declared
            # indices are asked: a kernel with fewer parameters fails here; one with more is not seen on these
            # drivers.
            for i in range(declared):
                if lib.cuFuncGetParamInfo(func, ctypes.c_size_t(i), ctypes.byref(off), ctypes.byref(size)):
                    raise NnbenchError(f"kernel {name}: its signature has {declared} parameters; the kernel has {i}")
                offsets.append(off.value)
    finally:
        lib.cuModuleUnload(module)
    return offsets
