"""Vendor baselines (cuBLAS, cuDNN, PyTorch) on nnbench's own device buffers, in one place.

Each returns launchers: no-argument callables that enqueue the library's work on the current
stream, so that `measure` times them exactly as it times our kernels (same warm-up, L2 state and
stopping rule) and the suites verify their outputs with the same verifier. Knows no workload.
"""

from __future__ import annotations

import numpy as np

from nnbench.errors import KernelFault, NnbenchError

TF32_TENSOR_OP_MATH = 3  # cublasMath_t's CUBLAS_TF32_TENSOR_OP_MATH (cublas_api.h); CuPy's module lacks the name


# -- cuBLAS ---------------------------------------------------------------------------------------
class Cublas:
    """cuBLAS SGEMM through CuPy (preferred: the plain column-major sgemm call) or PyTorch, on the
    same primary context and buffers as nnbench, with TF32 off. `reason` says why it is missing."""

    def __init__(self, backend) -> None:
        self.backend, self.via, self.reason = backend, None, None
        if backend.name != "cuda":
            self.reason = "no GPU backend"
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
def cudnn_conv_forward(x_ptr: int, w_ptr: int, dims: tuple[int, ...], stride: int, pad: int, out: int,
                       tf32: bool = False):
    """cuDNN's forward convolution through PyTorch on nnbench's X and filters (NCHW), autotuned
    (benchmark mode: cuDNN times its algorithms on the first call, which `measure`'s warm-up takes),
    writing its own output. Returns (launch, result): result() is the last output, for the verifier,
    copied into nnbench's buffer at `out`. None without PyTorch."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None
    torch.backends.cudnn.benchmark = True
    N, C, H, W, K, R = dims
    x, w = torch_view(torch, x_ptr, (N, C, H, W)), torch_view(torch, w_ptr, (K, C, R, R))
    last = {}

    def launch():  # the flag is global and read at each call: set for this row's calls only
        torch.backends.cudnn.allow_tf32 = tf32
        last["y"] = F.conv2d(x, w, stride=stride, padding=pad)
        torch.backends.cudnn.allow_tf32 = False

    def result() -> None:
        y = last["y"]
        torch_view(torch, out, tuple(y.shape)).copy_(y)
        torch.cuda.synchronize()
    return launch, result


def cudnn_conv_backward(x_ptr: int, w_ptr: int, dy_ptr: int, dims: tuple[int, ...], stride: int, pad: int,
                        dx_out: int, dw_out: int, tf32: bool = False):
    """cuDNN's backward convolution (data and filter gradients in one call, as autograd issues them:
    aten.convolution_backward) through PyTorch on nnbench's X, filters and dY (NCHW), autotuned like
    the forward, writing its own outputs. Returns (launch, result): result() copies the last dX and
    dW into nnbench's buffers, for the verifier. None without PyTorch."""
    try:
        import torch
    except ImportError:
        return None
    torch.backends.cudnn.benchmark = True
    N, C, H, W, K, R = dims
    x, w = torch_view(torch, x_ptr, (N, C, H, W)), torch_view(torch, w_ptr, (K, C, R, R))
    Ho, Wo = (H + 2 * pad - R) // stride + 1, (W + 2 * pad - R) // stride + 1
    dy = torch_view(torch, dy_ptr, (N, K, Ho, Wo))
    last = {}

    def launch():
        torch.backends.cudnn.allow_tf32 = tf32
        last["dx"], last["dw"], _ = torch.ops.aten.convolution_backward(
            dy, x, w, None, [stride, stride], [pad, pad], [1, 1], False, [0, 0], 1, [True, True, False])
        torch.backends.cudnn.allow_tf32 = False

    def result() -> None:
        torch_view(torch, dx_out, (N, C, H, W)).copy_(last["dx"])
        torch_view(torch, dw_out, (K, C, R, R)).copy_(last["dw"])
        torch.cuda.synchronize()
    return launch, result
