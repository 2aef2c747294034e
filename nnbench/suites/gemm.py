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

import time
from dataclasses import dataclass, field

import numpy as np

from nnbench import measure, registry
from nnbench.errors import CompileError, KernelFault, NnbenchError
from nnbench.registry import Variant
from nnbench.runtime.compile import compile_sources

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
    problems = v.device_problems(params, device)
    if problems:
        opts = " ".join(f"--{k.lower()} {val}" for k, val in params.items())
        raise NnbenchError(f"{v.name} {opts}: {problems[0]}")


def footprint(shape: Shape) -> tuple[float, float]:
    """(host bytes, device bytes) one shape needs at its peak, estimated before anything is made.
    Host: A, B, C0 (fp32) and A @ B (fp64) kept, A and B in fp64 while the product is made, and the
    fp64 temporaries of a reference and of an error check. Device: A, B, C, C0 (fp32) and the two
    references (fp64)."""
    ab, mn = shape.M * shape.K + shape.K * shape.N, shape.M * shape.N
    host = 4 * (ab + mn) + 8 * mn + 8 * ab + 3 * 8 * mn
    device = 4 * (ab + 2 * mn) + 2 * 8 * mn
    return float(host), float(device)


# -- data -----------------------------------------------------------------------------------------
def random_nonzero(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    """Column-major float32 in ±[0.1, 1): never zero, so an unread operand changes the answer.

    One float32 draw per element, made in column-major order and transformed in place: draws in
    [0, 0.5) become the negative values, [0.5, 1) the positive ones. (Drawing float64 and building
    new arrays at each step took most of a 4096^3 problem's set-up time.)"""
    t = rng.random((shape[1], shape[0]), dtype=np.float32).T
    t *= 2
    negative = t < 1
    t -= ~negative
    t *= np.float32(0.9)
    t += np.float32(0.1)
    np.negative(t, out=t, where=negative)
    return t


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

            cp_device.Device(backend.ordinal).use()  # CuPy's handle on nnbench's GPU (a rank's may not be 0)
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


# -- running --------------------------------------------------------------------------------------
class Session:
    """One backend's workspace for GEMM cases: the current shape's operands and float64 references
    on the device, and cuBLAS. `gemm` runs it in-process; a sweep runs one per worker process.

    Each shape's inputs come from a generator seeded by (seed, M, N, K): a fresh worker that
    replaces a crashed one rebuilds exactly the same problem."""

    def __init__(self, backend, settings: measure.TimingSettings, rtol: float = DEFAULT_RTOL,
                 seed: int | None = None, env: dict | None = None) -> None:
        self.backend, self.settings, self.rtol = backend, settings, rtol
        self.seed = int(np.random.SeedSequence().entropy % 2**32) if seed is None else seed
        self.env = env or {}
        self.device = getattr(backend, "device", None)
        self._cublas: Cublas | None = None
        self._shape: Shape | None = None
        self._bufs: _Buffers | None = None
        self._next = None  # (shape, future of its Problem)
        self._pool = None

    def problem(self, shape: Shape) -> Problem:
        return Problem.make(shape, np.random.default_rng([self.seed, shape.M, shape.N, shape.K]))

    def prefetch(self, shape: Shape | None) -> None:
        """Build the next shape's inputs and float64 reference on a CPU thread while the GPU times
        this shape's cases (NumPy's BLAS releases the GIL). A sweep worker leaves two cores to the
        timing thread, so launches are not delayed by the reference."""
        if shape is None or shape == self._shape or (self._next and self._next[0] == shape):
            return
        from concurrent.futures import ThreadPoolExecutor
        self._pool = self._pool or ThreadPoolExecutor(max_workers=1, thread_name_prefix="reference")
        self._next = (shape, self._pool.submit(self.problem, shape))

    def buffers(self, shape: Shape) -> _Buffers:
        if shape != self._shape:
            self._bufs = None  # free the previous shape's device memory first
            ready = self._next[1].result() if self._next and self._next[0] == shape else None
            self._next = None
            self._bufs, self._shape = _Buffers(self.backend, ready or self.problem(shape)), shape
        return self._bufs

    def warm_up(self) -> None:
        """Load what the first case would otherwise wait for (cuBLAS, through CuPy)."""
        if self.backend.name == "cuda":
            _ = self.cublas.via

    def base_record(self, shape: Shape) -> dict:
        return dict(suite="gemm", shape=shape.label, **shape.as_dict(), flops=shape.flops, bytes=shape.bytes,
                    rtol=self.rtol, cold=self.settings.cold, seed=self.seed, **self.env)

    @property
    def cublas(self) -> Cublas:
        if self._cublas is None:
            self._cublas = Cublas(self.backend)
        return self._cublas

    def run_cublas(self, shape: Shape) -> dict | None:
        """cuBLAS's record for this shape, or None where cuBLAS is not available (see `cublas.reason`)."""
        if not self.cublas.via:
            return None
        bufs = self.buffers(shape)
        pa, pb, pc = bufs.ptrs()
        rec = dict(self.base_record(shape), variant="cublas", step="", params=f"sgemm via {self.cublas.via}, TF32 off")
        return self._timed(rec, bufs, lambda a, b: self.cublas.launcher(shape, pa, pb, pc, a, b))

    def run_case(self, case: Case, shape: Shape, compiled=None) -> dict:
        """Verify then time one case. A kernel fault comes back as an ERROR record with `fault`
        set: the context is poisoned and the caller must stop using this backend."""
        v = case.variant
        bufs = self.buffers(shape)
        rec = dict(self.base_record(shape), variant=v.name, step=v.step, params=case.param_label)
        if v.backend == "cpu":
            return self._timed(rec, bufs, lambda a, b: _numpy_launcher(bufs, a, b))
        if isinstance(compiled, CompileError):
            return dict(rec, status="ERROR", error=str(compiled))
        params = case.param_dict
        kernel = self.backend.load(compiled, v.kernel)
        occ = self.backend.occupancy(kernel, v.threads(params))
        rec.update(threads=v.threads(params), registers=kernel.info.registers, smem_bytes=kernel.info.smem_bytes,
                   local_bytes=kernel.info.local_bytes, occupancy=occ.occupancy, occupancy_limiter=occ.limiter)
        grid, block = v.launch_grid(params, shape.as_dict()), v.launch_block(params)
        pa, pb, pc = bufs.ptrs()
        M, N, K = np.int32(shape.M), np.int32(shape.N), np.int32(shape.K)
        return self._timed(rec, bufs, lambda a, b: self.backend.launcher(
            kernel, grid, block, (M, N, K, np.float32(a), pa, pb, np.float32(b), pc), SIGNATURE))

    def _timed(self, rec: dict, bufs: _Buffers, launch_for) -> dict:
        t0 = time.perf_counter()
        try:
            err, verify_ms = _verify(bufs, launch_for)
            stats = measure.measure(self.backend, launch_for(1.0, 0.0), self.settings)
        except KernelFault as e:
            return dict(rec, status="ERROR", error=f"kernel fault: {e}", fault=True)
        t = stats.median_ms * 1e-3
        shape = bufs.prob.shape
        rec.update(stats.as_record(), gflops=shape.flops / t / 1e9, gbs=shape.bytes / t / 1e9, rel_err=err,
                   status="PASS" if err <= self.rtol else "FAIL")
        rec["gpu_ms"] += verify_ms
        rec["wall_ms"] = 1e3 * (time.perf_counter() - t0)
        if self.device is not None and self.device.fp32_peak_flops:
            rec["pct_peak"] = 100 * shape.flops / t / self.device.fp32_peak_flops
        return rec


class _Buffers:
    """Device copies of one problem's operands and references; C is rewritten before every check."""

    def __init__(self, backend, prob: Problem) -> None:
        self.backend, self.prob = backend, prob
        self.A, self.B = backend.upload(prob.A), backend.upload(prob.B)
        self.C = backend.upload(prob.C0)
        self.C0 = backend.upload(prob.C0)  # kept on the device: a reset is a device copy, not an upload
        self.count = prob.C0.size
        self.refs = {(a, b): backend.upload(np.asfortranarray(prob.reference(a, b))) for a, b in CHECKS}

    def ptrs(self) -> tuple:
        b = self.backend
        return (b.ptr(self.A), b.ptr(self.B), b.ptr(self.C)) if b.name == "cuda" else (self.A, self.B, self.C)

    def poison(self) -> None:
        self.backend.fill_nan(self.C, self.count)

    def reset(self) -> None:
        self.backend.copy(self.C, self.C0, self.prob.C0.nbytes)

    def rel_err(self, alpha: float, beta: float) -> float:
        return self.backend.rel_err(self.C, self.refs[alpha, beta], self.count)


CHECKS = ((1.0, 0.0), (VERIFY_ALPHA, VERIFY_BETA))


def _verify(bufs: _Buffers, make_launch) -> tuple[float, float]:
    """Run both checks; return the larger relative error and the checks' kernel milliseconds."""
    errs, ms = [], 0.0
    for alpha, beta in CHECKS:
        bufs.poison() if beta == 0 else bufs.reset()
        ms += bufs.backend.timed(make_launch(alpha, beta), 1)
        errs.append(bufs.rel_err(alpha, beta))
    return max(errs), ms


def _numpy_launcher(bufs: _Buffers, alpha: float, beta: float):
    A, B, C = bufs.A, bufs.B, bufs.C
    if beta == 0 and alpha == 1:
        return lambda: np.matmul(A, B, out=C)
    return lambda: np.copyto(C, (alpha * (A @ B) + beta * C).astype(np.float32))


def compile_cases(arch: str, cases: list[Case], jobs: int | None = None) -> dict[Case, object]:
    """Compile every distinct kernel up front, in parallel; each value is a Compiled or a CompileError."""
    todo = [c for c in cases if c.variant.source]
    return dict(zip(todo, compile_sources(arch, [(c.variant.source, c.param_dict) for c in todo], jobs)))


def derive(rec: dict, cublas_ms: float | None, baseline_ms: float | None, baseline: str | None) -> dict:
    """Fill the comparisons that need other records: % of cuBLAS and speedup over the baseline."""
    ms = rec.get("median_ms")
    if ms and rec.get("status") in ("PASS", "FAIL"):
        rec["pct_cublas"] = 100 * cublas_ms / ms if cublas_ms else None
        if baseline_ms:
            rec["speedup"], rec["speedup_over"] = baseline_ms / ms, baseline
    return rec


def run(backend, cases: list[Case], shapes: list[Shape], settings: measure.TimingSettings,
        rtol: float = DEFAULT_RTOL, with_cublas: bool = True, seed: int | None = None, env: dict | None = None):
    """Yield one record per (shape, case), cuBLAS first for each shape. A kernel fault ends the run
    after its ERROR record: the context is poisoned, and everything before it is already yielded."""
    session = Session(backend, settings, rtol, seed, env)
    compiled = compile_cases(backend.arch, cases) if backend.name == "cuda" else {}
    for shape in shapes:
        cublas_ms = naive_ms = None
        if with_cublas and backend.name == "cuda":
            rec = session.run_cublas(shape)
            if rec is not None:
                cublas_ms = rec.get("median_ms") if rec["status"] == "PASS" else None
                yield rec
        for case in cases:
            rec = session.run_case(case, shape, compiled.get(case))
            if case.variant.name == "naive" and rec["status"] == "PASS":
                naive_ms = rec["median_ms"]
            yield derive(rec, cublas_ms, naive_ms, "naive")
            if rec.get("fault"):
                return
