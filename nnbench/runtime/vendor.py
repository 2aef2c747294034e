"""Vendor baselines (cuBLAS, cuDNN, PyTorch) on nnbench's own device buffers, in one place.

Each returns launchers: no-argument callables that enqueue the library's work on the current
stream, so that `measure` times them exactly as it times our kernels (same warm-up, L2 state and
stopping rule) and the workloads verify their outputs with the same verifier. Knows no workload.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import contextmanager
from typing import NamedTuple

import numpy as np

from nnbench import measure
from nnbench.errors import KernelFault, NnbenchError

TF32_TENSOR_OP_MATH = 3  # cublasMath_t's CUBLAS_TF32_TENSOR_OP_MATH (cublas_api.h); CuPy's module lacks the name


# -- cuBLAS ---------------------------------------------------------------------------------------
class Cublas:
    """cuBLAS SGEMM through CuPy (preferred: the plain column-major sgemm call) or PyTorch, on the
    same primary context and buffers as nnbench, with TF32 off. `reason` says why it is missing."""

    def __init__(self, backend) -> None:
        self.backend, self.via, self.reason = backend, None, None
        if not backend.has_vendor_libs:
            self.reason = f"none on the {backend.name} backend"
            return
        try:
            from cupy.cuda import device as cp_device
            from cupy_backends.cuda.libs import cublas

            cp_device.Device(backend.ordinal).use()  # CuPy's handle on nnbench's GPU (a rank's may not be 0)
            self.library = cublas
            self.handle = cp_device.get_cublas_handle()
            cublas.setMathMode(self.handle, cublas.CUBLAS_DEFAULT_MATH)  # never TF32
            self.via = "cupy"
            return
        except Exception as e:  # noqa: BLE001 - any failure just means "try the next library"
            cupy_err = f"CuPy: {type(e).__name__}"
        try:
            import torch

            torch.backends.cuda.matmul.allow_tf32 = False
            self._torch = torch
            self.via = "torch"
        except Exception as e:  # noqa: BLE001
            self.reason = f"neither CuPy nor PyTorch is usable ({cupy_err}; torch: {type(e).__name__})"

    def launcher(self, shape, pa: int, pb: int, pc: int, alpha: float, beta: float, tf32: bool = False):
        """C = alpha*A*B + beta*C, column-major, no transposes; `shape` has M, N and K. With tf32 the
        product runs on the tensor cores in TF32 (a labelled row for context, never the FP32 baseline):
        the math mode is the handle's, so it is set for that call and put back after it."""
        M, N, K = shape.M, shape.N, shape.K
        if self.via == "cupy":
            a = np.array([alpha], dtype=np.float32)
            b = np.array([beta], dtype=np.float32)
            cb, h = self.library, self.handle
            # Column-major, no transposes: exactly C = alpha*A*B + beta*C with lda=M, ldb=K, ldc=M.
            if not tf32:
                return lambda: cb.sgemm(h, 0, 0, M, N, K, a.ctypes.data, pa, M, pb, K, b.ctypes.data, pc, M)

            def tf32_call():
                cb.setMathMode(h, TF32_TENSOR_OP_MATH)
                cb.sgemm(h, 0, 0, M, N, K, a.ctypes.data, pa, M, pb, K, b.ctypes.data, pc, M)
                cb.setMathMode(h, cb.CUBLAS_DEFAULT_MATH)
            return tf32_call
        torch = self._torch
        if tf32:
            raise NnbenchError("cuBLAS TF32: needs CuPy")
        # Row-major views of the column-major buffers: C^T (N x M) = B^T (N x K) @ A^T (K x M).
        At, Bt, Ct = (torch_view(torch, p, shape) for p, shape in ((pa, (K, M)), (pb, (N, K)), (pc, (N, M))))
        if beta == 0 and alpha == 1:
            return lambda: torch.matmul(Bt, At, out=Ct)
        return lambda: Ct.copy_(torch.addmm(Ct, Bt, At, beta=beta, alpha=alpha))


def torch_view(torch, ptr: int, shape: tuple[int, ...]):
    """A float32 PyTorch tensor over nnbench's device buffer at `ptr` (row-major `shape`), no copy."""
    class _Cai:
        __cuda_array_interface__ = {"shape": tuple(shape), "typestr": "<f4", "data": (int(ptr), False),
                                    "version": 3, "strides": None}

    return torch.as_tensor(_Cai(), device="cuda")



class CublasGemm:
    """Column-major cuBLAS SGEMM through CuPy on nnbench's buffers, TF32 off: launchers for
    C = alpha op(A) op(B) + beta C."""

    def __init__(self, backend) -> None:
        c = Cublas(backend)
        if c.via != "cupy":
            raise NnbenchError(f"cuBLAS with transposes needs CuPy ({c.reason or 'CuPy is not installed'})")
        self.cb, self.h = c.library, c.handle
        self.direct = None  # libcublas itself, while a graph capture records this handle's calls

    def sgemm(self, trans_a: bool, trans_b: bool, shape, alpha: float, a: int, lda: int, b: int, ldb: int,
              beta: float, c: int, ldc: int):
        m, n, k = shape
        al, be = np.array([alpha], np.float32), np.array([beta], np.float32)
        cb, h, ta, tb = self.cb, self.h, int(trans_a), int(trans_b)

        def call():
            if self.direct is None:
                cb.sgemm(h, ta, tb, m, n, k, al.ctypes.data, a, lda, b, ldb, be.ctypes.data, c, ldc)
            elif status := self.direct.cublasSgemm_v2(h, ta, tb, m, n, k, al.ctypes.data, a, lda, b, ldb,
                                                       be.ctypes.data, c, ldc):
                raise KernelFault(f"cublasSgemm_v2 returned status {status} while capturing")
        return call

    def point(self, stream: int | None) -> None:
        """Send this handle's calls to `stream` (a CUstream handle) so that a graph capture records them
        (CudaBackend.capture); None: back to CuPy and the default stream. CuPy refuses every cuBLAS call
        while a stream captures (its setStream checks), so meanwhile the calls go to the libcublas that
        CuPy loaded, through ctypes, on CuPy's handle: the same library, handle and math mode."""
        if stream is None:
            if self.direct is not None:
                self.direct.cublasSetStream_v2(self.h, None)
            self.direct = None
            return
        lib = _loaded_cublas()
        if status := lib.cublasSetStream_v2(self.h, stream):
            raise KernelFault(f"cublasSetStream_v2 returned status {status}")
        self.direct = lib


def _loaded_cublas():
    """The libcublas already in this process (CuPy's), with the two calls a capture needs typed."""
    import ctypes
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "libcublas.so" in line and "libcublasLt" not in line}
    except OSError:
        paths = set()
    if not paths:
        raise NnbenchError("cuBLAS in a CUDA graph: libcublas is not loaded in this process (needs CuPy's)")
    lib = ctypes.CDLL(sorted(paths)[0])
    p, i = ctypes.c_void_p, ctypes.c_int
    lib.cublasSetStream_v2.argtypes, lib.cublasSetStream_v2.restype = [p, p], i
    lib.cublasSgemm_v2.argtypes = [p, i, i, i, i, i, p, p, i, p, i, p, p, i]
    lib.cublasSgemm_v2.restype = i
    return lib


# -- cuDNN ----------------------------------------------------------------------------------------
# PyTorch keys its autotune cache on the convolution, the TF32 flag and the deterministic flag, and
# autotunes once per key and process: each value of the deterministic flag is therefore an autotune
# draw of its own. A single draw can pick an algorithm 10% off cuDNN's best (cuDNN TF32 on N32 C64 56²
# K64 3x3 on the H100 took 0.091 ms in one process and 0.100 in another); the workloads time every draw
# and keep the fastest, so that the baseline gets cuDNN's best of two. (Deterministic engines are a
# subset of all; for a forward convolution nearly all of them.)
AUTOTUNE_DRAWS = (False, True)


class CudnnDraw(NamedTuple):
    """One autotune draw of a cuDNN call: launch() enqueues the call (its first call autotunes),
    result() copies the last outputs into nnbench's buffers for the verifier, kernels() names the
    kernels one call runs (the algorithm this draw chose)."""
    launch: Callable[[], None]
    result: Callable[[], None]
    kernels: Callable[[], str]
    label: str


def cudnn_conv(x_ptr: int, w_ptr: int, dims: tuple[int, ...], stride: int, pad: int, outputs: tuple[int, ...],
               tf32: bool = False, dy_ptr: int | None = None) -> list[CudnnDraw] | None:
    """cuDNN's convolution through PyTorch on nnbench's X and filters (NCHW), autotuned (benchmark
    mode: cuDNN times its algorithms on the first call, which `measure`'s warm-up takes), writing its
    own outputs: the forward (outputs: Y), or with dy_ptr the data and filter gradients in one call as
    autograd issues them, aten.convolution_backward (outputs: dX, dW). One draw per AUTOTUNE_DRAWS.
    None without PyTorch."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None
    torch.backends.cudnn.benchmark = True
    N, C, H, W, K, R = dims
    x, w = torch_view(torch, x_ptr, (N, C, H, W)), torch_view(torch, w_ptr, (K, C, R, R))
    if dy_ptr is None:
        def call():
            return (F.conv2d(x, w, stride=stride, padding=pad),)
    else:
        Ho, Wo = (H + 2 * pad - R) // stride + 1, (W + 2 * pad - R) // stride + 1
        dy = torch_view(torch, dy_ptr, (N, K, Ho, Wo))

        def call():
            dx, dw, _ = torch.ops.aten.convolution_backward(
                dy, x, w, None, [stride, stride], [pad, pad], [1, 1], False, [0, 0], 1, [True, True, False])
            return dx, dw
    return [_cudnn_draw(torch, call, outputs, tf32, deterministic) for deterministic in AUTOTUNE_DRAWS]


def _cudnn_draw(torch, call, outputs: tuple[int, ...], tf32: bool, deterministic: bool) -> CudnnDraw:
    flags, last = torch.backends.cudnn, []

    def launch() -> None:  # the flags are global and read at each call: set for this draw's calls only
        flags.allow_tf32, flags.deterministic = tf32, deterministic
        last[:] = call()
        flags.allow_tf32, flags.deterministic = False, False

    def result() -> None:
        for ptr, t in zip(outputs, last):
            torch_view(torch, ptr, tuple(t.shape)).copy_(t)
        torch.cuda.synchronize()
    return CudnnDraw(launch, result, lambda: kernel_names(torch, launch),
                     f"deterministic {'on' if deterministic else 'off'}")


def kernel_names(torch, launch) -> str:
    """The kernels one call of `launch` runs, as short_kernel_names writes them, from PyTorch's
    profiler (CUPTI); or why they are unknown. Call it after the timing: the profiler's first use in a
    process costs a second or so on the host. CUPTI is torn down when the profiler stops
    (TEARDOWN_CUPTI=1 while it does; PyTorch's profiler reads it then): left subscribed, it made every
    later launch 1.4-2.5x slower to issue on the H100 (lab/scripts/independent_baselines.py measures it;
    lab/journal/baselines.md). PyTorch itself leaves the teardown off under torch.compile's CUDA
    graphs, where re-initializing CUPTI after one crashed on CUDA 11 and 12; the H100 runs were CUDA 13.
    Not in a soak (measure.VERDICTS_ONLY): the names are a note on a row whose time nobody reads there, and each
    draw's profiler session, CUPTI set up and torn down, cost more host time than the row's checks."""
    if measure.VERDICTS_ONLY[0]:
        return "kernels not named (a soak checks verdicts only)"
    try:
        from torch.profiler import ProfilerActivity, profile
        torch.cuda.synchronize()
        with _environment("TEARDOWN_CUPTI", "1"), profile(activities=[ProfilerActivity.CUDA]) as prof:
            launch()
            torch.cuda.synchronize()
        names = [e.name for e in prof.events() if str(getattr(e, "device_type", "")).endswith("CUDA")]
    except Exception as e:  # noqa: BLE001 - a name is a note on the row, never a reason to lose it
        return f"kernels unknown ({type(e).__name__}: {e})"[:160]
    return short_kernel_names(names) or "kernels unknown (the profiler saw none)"


@contextmanager
def _environment(name: str, value: str):
    """os.environ[name] = value inside the block, as it was after it."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def short_kernel_names(names: list[str]) -> str:
    """Kernel names without `void`, namespaces' template arguments and the argument list, in the order
    they ran, each once with its count: "sm90_xmma_fprop_implicit_gemm_..._cudnn + nchwToNhwcKernel x2"."""
    counts: dict[str, int] = {}
    for name in names:
        name = name.strip().removeprefix("void ")
        depth, out = 0, []
        for ch in name:  # drop every <...> (nested) and everything from the argument list's "(" on
            if ch == "<":
                depth += 1
            elif ch == ">" and depth:
                depth -= 1
            elif ch == "(" and not depth:
                break
            elif not depth:
                out.append(ch)
        short = "".join(out).strip()
        if short and not short.startswith(("Memcpy", "Memset")):
            counts[short] = counts.get(short, 0) + 1
    return " + ".join(k if n == 1 else f"{k} x{n}" for k, n in counts.items())
