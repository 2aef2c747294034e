"""The GEMM workload: inputs, the float64 reference, verification, FLOP/byte counts, cuBLAS.

Knows nothing about click or rich. `plan` turns user choices into validated cases; `run` yields one
flat record per case (cuBLAS first for each shape, then the ladder in step order), so the caller
can stream each to disk the moment it exists.

Verification, on every case before it is timed, with fresh random non-zero inputs:
  1. beta = 0 with C filled with NaN: BLAS says C is then write-only, so any element the kernel
     failed to write stays NaN and fails the check;
  2. alpha = 0.75, beta = -1.5 with a random C: checks the read-modify-write epilogue.
The error is ||C - ref|| / ||ref|| against float64 NumPy; the larger of the two must be <= rtol.
Timing uses alpha = 1, beta = 0, as cuBLAS benchmarks do.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from nnbench import measure, paths, registry
from nnbench.errors import CompileError, KernelFault, NnbenchError
from nnbench.registry import Variant
from nnbench.runtime.compile import CompileRequest, compile_many

SIGNATURE = "iiifPPfP"  # M, N, K, alpha, A, B, beta, C
DEFAULT_RTOL = 5e-5  # fp32 at K = 4096 lands near 3e-6; TF32 near 3e-4 must fail
VERIFY_ALPHA, VERIFY_BETA = 0.75, -1.5
INDEX_LIMIT = 2**31  # the kernels index with 32-bit ints: every matrix stays under this many elements


@dataclass(frozen=True)
class Shape:
    M: int
    N: int
    K: int

    def as_dict(self) -> dict[str, int]:
        return {"M": self.M, "N": self.N, "K": self.K}

    @property
    def label(self) -> str:
        return f"{self.M}×{self.N}×{self.K}"

    @property
    def flops(self) -> float:
        return 2.0 * self.M * self.N * self.K

    @property
    def bytes(self) -> float:
        """The fewest bytes a beta = 0 GEMM moves: read A and B once, write C once."""
        return 4.0 * (self.M * self.K + self.K * self.N + self.M * self.N)


@dataclass(frozen=True)
class Case:
    variant: Variant
    params: tuple[tuple[str, int], ...] = ()

    @property
    def param_dict(self) -> dict[str, int]:
        return dict(self.params)

    @property
    def param_label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.params)


# -- planning -------------------------------------------------------------------------------------
def validate_shape(shape: Shape) -> None:
    for name, v in shape.as_dict().items():
        if v < 1:
            raise NnbenchError(f"--{name.lower()} {v}: sizes must be integers >= 1")
    for a, b in (("M", "K"), ("K", "N"), ("M", "N")):
        n = getattr(shape, a) * getattr(shape, b)
        if n >= INDEX_LIMIT:
            raise NnbenchError(f"shape {shape.label}: {a}*{b} = {n:,} elements exceeds the ladder's 32-bit index "
                               f"range (< {INDEX_LIMIT:,})")


def plan(variant_names: list[str], overrides: dict[str, int], device=None, backend: str = "cuda") -> list[Case]:
    """Validated cases for the chosen variants with user overrides applied to the params they use.

    An override must apply to at least one chosen variant; a value must satisfy each variant's
    choices and rules; the launch must fit the device (threads, static shared memory).
    """
    available = registry.suite_variants("gemm", backend)
    if variant_names:
        chosen = [registry.get("gemm", n) for n in variant_names]
        wrong = [v for v in chosen if v.backend != backend]
        if wrong:
            names = ", ".join(v.name for v in available)
            raise NnbenchError(f"--variant {wrong[0].name}: needs the {wrong[0].backend} backend; "
                               f"the {backend} backend runs: {names}")
    else:
        chosen = available
    chosen = sorted(dict.fromkeys(chosen), key=lambda v: v.step)
    for name, value in overrides.items():
        users = [v for v in chosen if v.param(name)]
        if not users:
            takers = [v.name for v in registry.suite_variants("gemm") if v.param(name)]
            raise NnbenchError(f"--{name.lower()} {value}: none of the chosen variants takes {name}; "
                               f"it applies to {', '.join(takers)}")
    cases = []
    for v in chosen:
        params = v.defaults()
        params.update({k: val for k, val in overrides.items() if v.param(k)})
        problems = v.problems(params)
        if problems:
            raise NnbenchError(problems[0])
        if device is not None:
            fit_device(v, params, device)
        cases.append(Case(v, tuple(params.items())))
    return cases


def fit_device(v: Variant, params: dict[str, int], device) -> None:
    threads, smem = v.threads(params), v.smem_bytes(params)
    opts = " ".join(f"--{k.lower()} {val}" for k, val in params.items())
    if threads > device.max_threads_per_block:
        raise NnbenchError(f"{v.name} {opts}: {threads} threads per block; {device.name} allows at most "
                           f"{device.max_threads_per_block}")
    if smem > device.smem_per_block:
        raise NnbenchError(f"{v.name} {opts}: {smem:,} bytes of static shared memory per block; {device.name} "
                           f"allows at most {device.smem_per_block:,}")


# -- data -----------------------------------------------------------------------------------------
def random_nonzero(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    """Column-major float32 in ±[0.1, 1): never zero, so an unread operand changes the answer."""
    mag = rng.uniform(0.1, 1.0, size=shape)
    sign = np.where(rng.random(size=shape) < 0.5, -1.0, 1.0)
    return np.asfortranarray((mag * sign).astype(np.float32))


@dataclass
class Problem:
    shape: Shape
    A: np.ndarray
    B: np.ndarray
    C0: np.ndarray  # the C that the beta != 0 check reads
    ab: np.ndarray = field(repr=False)  # float64 A @ B

    @staticmethod
    def make(shape: Shape, rng: np.random.Generator) -> Problem:
        A = random_nonzero(rng, (shape.M, shape.K))
        B = random_nonzero(rng, (shape.K, shape.N))
        C0 = random_nonzero(rng, (shape.M, shape.N))
        return Problem(shape, A, B, C0, A.astype(np.float64) @ B.astype(np.float64))

    def reference(self, alpha: float, beta: float) -> np.ndarray:
        return alpha * self.ab + (beta * self.C0.astype(np.float64) if beta != 0 else 0.0)


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

            self._cublas = cublas
            self._handle = cp_device.get_cublas_handle()
            cublas.setMathMode(self._handle, cublas.CUBLAS_DEFAULT_MATH)  # never TF32
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

    def launcher(self, shape: Shape, pa: int, pb: int, pc: int, alpha: float, beta: float):
        M, N, K = shape.M, shape.N, shape.K
        if self.via == "cupy":
            a = np.array([alpha], dtype=np.float32)
            b = np.array([beta], dtype=np.float32)
            cb, h = self._cublas, self._handle
            # Column-major, no transposes: exactly C = alpha*A*B + beta*C with lda=M, ldb=K, ldc=M.
            return lambda: cb.sgemm(h, 0, 0, M, N, K, a.ctypes.data, pa, M, pb, K, b.ctypes.data, pc, M)
        torch = self._torch
        # Row-major views of the column-major buffers: C^T (N x M) = B^T (N x K) @ A^T (K x M).
        At, Bt, Ct = (_torch_view(torch, p, r, c) for p, r, c in ((pa, K, M), (pb, N, K), (pc, N, M)))
        if beta == 0 and alpha == 1:
            return lambda: torch.matmul(Bt, At, out=Ct)
        return lambda: Ct.copy_(torch.addmm(Ct, Bt, At, beta=beta, alpha=alpha))


def _torch_view(torch, ptr: int, rows: int, cols: int):
    class _Cai:
        __cuda_array_interface__ = {"shape": (rows, cols), "typestr": "<f4", "data": (ptr, False),
                                    "version": 3, "strides": None}

    return torch.as_tensor(_Cai(), device="cuda")


# -- running --------------------------------------------------------------------------------------
class _Buffers:
    """Device copies of one problem's operands; C is rewritten before every check."""

    def __init__(self, backend, prob: Problem) -> None:
        self.backend, self.prob = backend, prob
        self.A, self.B = backend.upload(prob.A), backend.upload(prob.B)
        self.C = backend.upload(prob.C0)
        self.count = prob.C0.size

    def ptrs(self) -> tuple:
        b = self.backend
        return (b.ptr(self.A), b.ptr(self.B), b.ptr(self.C)) if b.name == "cuda" else (self.A, self.B, self.C)

    def poison(self) -> None:
        self.backend.fill_nan(self.C, self.count)

    def reset(self) -> None:
        self.backend.write(self.C, self.prob.C0)

    def result(self) -> np.ndarray:
        return self.backend.download(self.C, self.prob.C0)


def _verify(bufs: _Buffers, make_launch) -> float:
    """Run both checks; return the larger relative error."""
    errs = []
    for alpha, beta in ((1.0, 0.0), (VERIFY_ALPHA, VERIFY_BETA)):
        bufs.poison() if beta == 0 else bufs.reset()
        make_launch(alpha, beta)()
        bufs.backend.synchronize()
        errs.append(measure.rel_err(bufs.result(), bufs.prob.reference(alpha, beta)))
    return max(errs)


def _numpy_launcher(bufs: _Buffers, alpha: float, beta: float):
    A, B, C = bufs.A, bufs.B, bufs.C
    if beta == 0 and alpha == 1:
        return lambda: np.matmul(A, B, out=C)
    return lambda: np.copyto(C, (alpha * (A @ B) + beta * C).astype(np.float32))


def compile_cases(backend, cases: list[Case]) -> dict[Case, object]:
    """Compile every distinct kernel up front, in parallel; each value is a Compiled or a CompileError."""
    todo = [c for c in cases if c.variant.source]
    reqs = [CompileRequest.make(paths.KERNELS / c.variant.source, c.param_dict, backend.arch) for c in todo]
    return dict(zip(todo, compile_many(reqs, return_errors=True)))


def run(backend, cases: list[Case], shapes: list[Shape], settings: measure.TimingSettings,
        rtol: float = DEFAULT_RTOL, with_cublas: bool = True, seed: int | None = None, env: dict | None = None):
    """Yield one record per (shape, case), cuBLAS first for each shape. A kernel fault ends the run
    after its ERROR record: the context is poisoned, and everything before it is already yielded."""
    seed = int(np.random.SeedSequence().entropy % 2**32) if seed is None else seed
    rng = np.random.default_rng(seed)
    env = env or {}
    compiled = compile_cases(backend, cases) if backend.name == "cuda" else {}
    cublas = Cublas(backend) if with_cublas and backend.name == "cuda" else None
    device = getattr(backend, "device", None)

    for shape in shapes:
        prob = Problem.make(shape, rng)
        bufs = _Buffers(backend, prob)
        base = dict(suite="gemm", shape=shape.label, **shape.as_dict(), flops=shape.flops, bytes=shape.bytes,
                    rtol=rtol, cold=settings.cold, seed=seed, **env)
        cublas_ms = naive_ms = None

        if cublas is not None and cublas.via:
            pa, pb, pc = bufs.ptrs()
            rec = dict(base, variant="cublas", step="", params=f"sgemm via {cublas.via}, TF32 off")
            rec.update(_verify_and_time(backend, bufs, lambda a, b: cublas.launcher(shape, pa, pb, pc, a, b),
                                        settings, rtol, device))
            if rec["status"] == "PASS":
                cublas_ms = rec["median_ms"]
            yield rec

        for case in cases:
            v = case.variant
            rec = dict(base, variant=v.name, step=v.step, params=case.param_label)
            if v.backend == "cpu":
                launch_for = lambda a, b: _numpy_launcher(bufs, a, b)  # noqa: E731
            else:
                comp = compiled[case]
                if isinstance(comp, CompileError):
                    yield dict(rec, status="ERROR", error=str(comp))
                    continue
                kernel = backend.load(comp, v.kernel)
                occ = backend.occupancy(kernel, v.threads(case.param_dict))
                rec.update(threads=v.threads(case.param_dict), registers=kernel.info.registers,
                           smem_bytes=kernel.info.smem_bytes, local_bytes=kernel.info.local_bytes,
                           occupancy=occ.occupancy, occupancy_limiter=occ.limiter)
                grid = v.launch_grid(case.param_dict, shape.as_dict())
                block = v.launch_block(case.param_dict)
                pa, pb, pc = bufs.ptrs()
                launch_for = lambda a, b, k=kernel, g=grid, bl=block: backend.launcher(  # noqa: E731
                    k, g, bl, (np.int32(shape.M), np.int32(shape.N), np.int32(shape.K), np.float32(a), pa, pb,
                               np.float32(b), pc), SIGNATURE)
            try:
                rec.update(_verify_and_time(backend, bufs, launch_for, settings, rtol, device))
            except KernelFault as e:
                yield dict(rec, status="ERROR", error=f"kernel fault: {e}")
                return
            if v.name == "naive" and rec["status"] == "PASS":
                naive_ms = rec["median_ms"]
            rec["pct_cublas"] = 100 * cublas_ms / rec["median_ms"] if cublas_ms else None
            rec["speedup_vs_naive"] = naive_ms / rec["median_ms"] if naive_ms else None
            yield rec


def _verify_and_time(backend, bufs: _Buffers, launch_for, settings, rtol, device) -> dict:
    err = _verify(bufs, launch_for)
    stats = measure.measure(backend, launch_for(1.0, 0.0), settings)
    t = stats.median_ms * 1e-3
    shape = bufs.prob.shape
    out = dict(median_ms=stats.median_ms, iqr_ms=stats.iqr_ms, q1_ms=stats.q1_ms, q3_ms=stats.q3_ms,
               min_ms=stats.min_ms, mean_ms=stats.mean_ms, samples=stats.samples, reps=stats.reps,
               noise=stats.noise, converged=stats.converged, sm_clock_mhz=stats.sm_clock_mhz,
               gflops=shape.flops / t / 1e9, gbs=shape.bytes / t / 1e9,
               rel_err=err, status="PASS" if err <= rtol else "FAIL")
    if device is not None and device.fp32_peak_flops:
        out["pct_peak"] = 100 * shape.flops / t / device.fp32_peak_flops
    return out
