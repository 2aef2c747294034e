"""The GEMM workload: inputs, the float64 reference, verification, FLOP/byte counts, cuBLAS.

Knows nothing about click or rich. `plan` turns user choices into validated cases; `run` yields one
flat record per case (cuBLAS first for each shape, then the ladder in step order), so the caller
can stream each to disk the moment it exists.

Verification, on every case before it is timed, with fresh random non-zero inputs:
  1. beta = 0 with C filled with NaN: BLAS says C is then write-only, so any element the kernel
     failed to write stays NaN and fails the check;
  2. alpha = 0.75, beta = -1.5 with a random C: checks the read-modify-write epilogue.
The error is each element's |C - ref| against the magnitudes that enter it, |alpha|(|A||B|) + |beta||C0|
(measure.conditioned_error, the LAPACK test ratio), the largest over C and over both checks; it must be at
most the limit for the row's precision and K (measure.error_limit; docs/VERIFICATION.md derives it), or the
user's --rtol. A norm-wise ||C - ref|| / ||ref|| divides by an output that the beta check's cancellation can
bring near zero: at 1x1x1 it read 0.016-0.05 for correct TF32 rows.
Timing uses alpha = 1, beta = 0, as cuBLAS benchmarks do. After timing, every row, ours and cuBLAS's, is
audited (nnbench/audit.py): timed-output, inputs-unchanged, fresh-buffers (_fresh_failure), zero-output
(_Buffers.zero_error), hidden-work and roofline.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from nnbench import audit, measure, registry
from nnbench.errors import CompileError, KernelFault, NnbenchError
from nnbench.registry import Variant
from nnbench.runtime import tensormap
from nnbench.runtime.device import FFMA, TF32
from nnbench.runtime.ladder_gemm import SIGNATURE
from nnbench.runtime.params import raw as params_raw
from nnbench.runtime.vendor import Cublas
from nnbench.workloads.base import Case, Session, Workload, problem_text
from nnbench.workloads.gemm.problem import INDEX_LIMIT, Shape, footprint, gemm_shapes, validate_shape  # noqa: F401
from nnbench.workloads.gemm.variants import VARIANTS

DEFAULT_RTOL = None  # each row's limit from its precision and K (measure.error_limit); --rtol sets one for
# the fp32-level rows (FFMA, 3xTF32); a TF32 row always keeps its own
VERIFY_ALPHA, VERIFY_BETA = 0.75, -1.5


# -- planning -------------------------------------------------------------------------------------
def plan(variant_names: list[str], overrides: dict[str, int], device=None, backend: str = "cuda") -> list[Case]:
    """Validated cases for the chosen variants with user overrides applied to the params they use.

    An override must apply to at least one chosen variant; a value must satisfy each variant's
    choices and rules; the launch must fit the device (threads, static shared memory).
    """
    available = registry.of_workload(VARIANTS, "gemm", backend)
    if variant_names:
        chosen = [registry.find(VARIANTS, "gemm", n) for n in variant_names]
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
            takers = [v.name for v in registry.of_workload(VARIANTS, "gemm") if v.param(name)]
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
    """Refuse a launch the device cannot take. A variant built for another architecture is not
    refused here: its cases become SKIP rows, so the other steps still run."""
    problems = v.device_problems(params, device, arch=False)
    if problems:
        opts = " ".join(f"--{k.lower()} {val}" for k, val in params.items())
        raise NnbenchError(f"{v.name} {opts}: {problems[0]}")


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
    refs: dict | None = field(default=None, repr=False)  # each check's float64 reference, column-major
    mags: dict | None = field(default=None, repr=False)  # each check's |alpha|(|A||B|) + |beta||C0|, the same

    @staticmethod
    def make(shape: Shape, rng: np.random.Generator) -> Problem:
        A = random_nonzero(rng, (shape.M, shape.K))
        B = random_nonzero(rng, (shape.K, shape.N))
        C0 = random_nonzero(rng, (shape.M, shape.N))
        prob = Problem(shape, A, B, C0, A.astype(np.float64) @ B.astype(np.float64))
        # The references in the layout the device copy wants, made here (on the prefetch thread in a
        # sweep) rather than when the buffers are uploaded, which the first case waits for.
        prob.refs = {(a, b): np.asfortranarray(prob.reference(a, b)) for a, b in CHECKS}
        prob.mags = prob.magnitudes()
        return prob

    def magnitudes(self) -> dict:
        """Each check's |alpha|(|A||B|) + |beta||C0| in float64: what enters each element of C."""
        absab = np.abs(self.A).astype(np.float64) @ np.abs(self.B).astype(np.float64)
        return {(a, b): np.asfortranarray(abs(a) * absab + (abs(b) * np.abs(self.C0.astype(np.float64)) if b else 0.0))
                for a, b in CHECKS}

    def reference(self, alpha: float, beta: float) -> np.ndarray:
        return alpha * self.ab + (beta * self.C0.astype(np.float64) if beta != 0 else 0.0)


# -- running --------------------------------------------------------------------------------------
class GemmSession(Session):
    """One backend's workspace for GEMM cases: the current shape's operands and float64 references
    on the device, and cuBLAS. `gemm` runs it in-process; a sweep runs one per worker process.

    Each shape's inputs come from a generator seeded by (seed, M, N, K): a fresh worker that
    replaces a crashed one rebuilds exactly the same problem."""

    def __init__(self, backend, settings: measure.TimingSettings, rtol: float | None = DEFAULT_RTOL,
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
        if self.backend.has_vendor_libs:
            _ = self.cublas.via

    def prepare(self, problem: Shape, following: Shape | None = None) -> None:
        self.buffers(problem)
        self.prefetch(following)

    def base_record(self, shape: Shape) -> dict:
        return dict(workload="gemm", shape=shape.label, problem=problem_text(shape), flops=shape.flops,
                    bytes=shape.bytes, rtol=self.rtol, cold=self.settings.cold, seed=self.seed, unit="launch",
                    **self.env)

    @property
    def cublas(self) -> Cublas:
        if self._cublas is None:
            self._cublas = Cublas(self.backend)
        return self._cublas

    def run_vendor(self, name: str, shape: Shape) -> dict | None:
        """cuBLAS's record for this shape (FP32, the baseline; or TF32, a labelled row for context, checked
        against TF32's own limit), or None where cuBLAS is not available (see `cublas.reason`)."""
        tf32 = name == "cublas-tf32"
        if name not in ("cublas", "cublas-tf32") or not self.cublas.via or (tf32 and self.cublas.via != "cupy"):
            return None
        bufs = self.buffers(shape)
        rec = dict(self.base_record(shape), variant=name, step="", precision=TF32 if tf32 else FFMA,
                   params=f"sgemm via {self.cublas.via}, TF32 {'on' if tf32 else 'off'}")

        def build(ops: _Operands):  # a baseline is checked on fresh buffers as our rows are
            pa, pb, pc = ops.ptrs()
            return lambda a, b: self.cublas.launcher(shape, pa, pb, pc, a, b, tf32)
        return self._timed(rec, bufs, build(bufs), build)

    def run_case(self, case: Case, shape: Shape, compiled=None) -> dict:
        """Verify then time one case. A kernel fault comes back as an ERROR record with `fault`
        set: the context is poisoned and the caller must stop using this backend."""
        v = case.variant
        bufs = self.buffers(shape)
        rec = dict(self.base_record(shape), variant=v.name, step=v.step, params=case.param_label,
                   precision=v.precision)
        if v.backend == "cpu":
            def host(ops: _Operands):
                return lambda a, b: _numpy_launcher(ops, a, b)
            return self._timed(rec, bufs, host(bufs), host)
        if self.device is not None and (why := v.arch_problem(self.device)):
            return dict(rec, status="SKIP", error=why)
        if isinstance(compiled, CompileError):
            return dict(rec, status="ERROR", error=str(compiled))
        params = case.param_dict
        if self.tuner is not None and v.param("ADAPT") and self.tuner.takes(v):
            params, compiled = self._tuned(rec, v, params, compiled, shape, bufs)
        loaded = kernel = self.backend.load(compiled, v.kernel)
        same = _SameModules(self.backend)

        def build(ops: _Operands):  # gemm_launch again: tensor maps, split-K counters and workspace of their own
            return gemm_launch(same, loaded, v, params, shape, *ops.ptrs())[0]
        launch_for, path = gemm_launch(same, kernel, v, params, shape, *bufs.ptrs())
        # The kernel that runs: step 9's transposed one where the host took that path (`ran`), else the variant's.
        kernel, threads, smem = getattr(launch_for, "ran", (kernel, v.threads(params), v.dynamic_smem_bytes(params)))
        occ = self.backend.occupancy(kernel, threads, smem)
        rec.update(threads=threads, registers=kernel.info.registers, smem_bytes=kernel.info.smem_bytes + smem,
                   local_bytes=kernel.info.local_bytes, occupancy=occ.occupancy, occupancy_limiter=occ.limiter)
        if path:
            rec["params"] = f"{rec['params']} · {path}"
        return self._timed(rec, bufs, launch_for, build)

    def _tuned(self, rec: dict, v: Variant, params: dict, compiled, shape: Shape, bufs: _Buffers):
        """Step 9's tile and split for this shape, as the autotuner (nnbench/runtime/autotune.py) chose
        them among step9_candidates: (the parameters, their module). The record's `params` names them
        and `tuned` says how they were chosen."""
        from nnbench import paths
        from nnbench.runtime.autotune import label
        from nnbench.runtime.compile import source_hash, variant_module

        def module(p: dict):
            code = dict(p, **{name: params[name] for name in HOST_SIDE})  # the host-side values: the case's cubin
            return compiled if code == params else variant_module(v, code, self.backend.arch)

        def build(c: dict):
            p = dict(params, **c)
            kernel = self.backend.load(module(p), v.kernel)
            return gemm_launch(self.backend, kernel, v, p, shape, *bufs.ptrs())[0](1.0, 0.0)
        choice = self.tuner.choose(f"{v.workload}/{v.name} {label(params)}", source_hash(paths.KERNELS / v.source),
                                   shape.label, step9_candidates(v, params, shape, self.device), build)
        chosen = dict(params, **choice.params)
        rec.update(params=f"{label(chosen)} · tuned ({choice.how})", tuned=choice.marker())  # the table says so too
        return chosen, module(chosen)

    def _timed(self, rec: dict, bufs: _Buffers, launch_for, build) -> dict:
        """Verify, time and audit one row. `launch_for(alpha, beta)` launches on the problem's buffers;
        `build(operands)` makes the same row's `launch_for` on another set of A, B and C (an `_Operands`), for the
        fresh-buffers check."""
        t0 = time.perf_counter()
        shape = bufs.prob.shape
        if self.rtol is None or rec.get("precision") == TF32:
            # a TF32 row (cuBLAS TF32, step 9 at PRECISION=1) is context, never held to an fp32-level --rtol
            # or a config's timing.rtol: it keeps its own precision's limit
            rec["rtol"] = measure.error_limit(rec.get("precision"), shape.K)
        try:
            err, verify_ms = _verify(bufs, launch_for)
            stats = measure.measure(self.backend, launch_for(1.0, 0.0), self.settings, _last_batch(bufs, rec["rtol"]))
            edited = audit.changed({"A": bufs.prob.A, "B": bufs.prob.B},
                                   {"A": bufs.backend.download(bufs.A, bufs.prob.A),
                                    "B": bufs.backend.download(bufs.B, bufs.prob.B)}) \
                if audit.enabled(audit.INPUTS_UNCHANGED) else []
            fresh = _fresh_failure(bufs, launch_for, build, rec["rtol"]) if audit.enabled(audit.FRESH_BUFFERS) \
                else None
            blind = audit.enabled(audit.ZERO_OUTPUT) and bufs.zero_error() <= rec["rtol"]
        except KernelFault as e:
            return dict(rec, status="ERROR", error=f"kernel fault: {e}", fault=True)
        t = stats.median_ms * 1e-3
        rec.update(stats.as_record(), gflops=shape.flops / t / 1e9, gbs=shape.bytes / t / 1e9, rel_err=err,
                   status="PASS" if err <= rec["rtol"] else "FAIL")
        rec["gpu_ms"] += verify_ms
        rec["wall_ms"] = 1e3 * (time.perf_counter() - t0)
        peak = self.device.peak_flops(rec.get("precision")) if self.device is not None else None
        if peak:
            rec["pct_peak"] = 100 * shape.flops / t / peak
        return audit.judge(rec, [
            (audit.TIMED_OUTPUT, stats.last_failure),
            (audit.INPUTS_UNCHANGED, edited and f"the kernel changed {' and '.join(edited)} while it was timed"),
            (audit.FRESH_BUFFERS, fresh),
            (audit.ZERO_OUTPUT, blind and f"an all-zero C would pass this check (error {bufs.zero_error():.3g}, the "
             f"largest |reference| over its magnitudes, is within the limit {rec['rtol']:.3g}): give a smaller --rtol"),
            (audit.HIDDEN_WORK, audit.hidden_work(stats.settle_ms, stats.last_batch_ms or 0.0)),
            (audit.ROOFLINE, audit.device_roofline(self.device, rec.get("precision"), shape.flops, shape.bytes, t))])


def gemm_launch(backend, kernel, v: Variant, params: dict[str, int], shape: Shape, pa: int, pb: int, pc: int):
    """(launch_for(alpha, beta), path) for one GEMM kernel on device buffers. A variant with tensor maps
    gets, per operand after C, its maps (`operand_maps`: A may take phase maps), then a bit mask of how
    the operands arrive (kernels_cu/common/wgmma_mainloop.cuh, PATH_*), split-K's per-tile counters and
    its workspace. An operand that cannot be mapped takes the kernel's cp.async path (a B whose leading
    dimension is not a multiple of 4: a padded copy first, inside the timed launch, measured slower on
    7 of 8 such shapes, lab/journal/gemm.md). `path` says which, for the table ("" without maps). One
    launch; with step 9's SPLIT_B=1 two, every time: `split_b` (B into its workspace, `presplit_b`), then the
    GEMM, whose B maps are the workspace's."""
    sig, extra, path = SIGNATURE, (), ""
    wide = wide_plan(shape, params, backend.device.sm_count, backend.device.smem_per_block_optin) \
        if v.tensor_maps else None
    if wide is not None:
        return _wide_launch(backend, v, params, shape, wide, pa, pb, pc)
    tile, why, grid, splits = launch_plan(v, params, shape, backend.device.sm_count)
    if tile != params:
        changed = " ".join(f"{k}={tile[k]}" for k in ("BM", "BN") if tile[k] != params[k])
        params = tile
        kernel = backend.load(_tile_module(backend, v, params), v.kernel)
        path = f"{changed} here ({why}), "
    block = v.launch_block(params)
    keep = []  # device buffers the launches use, alive as long as launch_for
    split = None  # SPLIT_B=1: B's split workspace and the launch that fills it
    if v.tensor_maps:
        operands = {"A": (pa, shape.M, shape.K), "B": (pb, shape.K, shape.N)}  # (pointer, rows, columns)
        bits, phased, fallback = 0, [], []
        split = presplit_b(backend, kernel, params, shape, pb) if params.get("SPLIT_B") else None
        for i, tm in enumerate(v.tensor_maps):
            ptr, rows, cols = operands[tm.operand]
            made = (split.maps(v.map_box(tm, params), tm.swizzle), False) if split and tm.operand == "B" else \
                operand_maps(ptr, rows, cols, v.map_box(tm, params), tm.swizzle, phases=tm.operand == "A")
            if made is None:
                extra += (bytes(PHASES * tensormap.MAP_BYTES),)
                fallback.append(tm.operand)
                continue
            maps, by_phase = made
            extra += (maps,)
            bits |= 1 << i
            if by_phase:
                bits |= PATH_PHASED_A | (rows % PHASES) << PATH_LD_A_SHIFT
                phased.append(tm.operand)
        sig += params_raw(PHASES * tensormap.MAP_BYTES, tensormap.MAP_ALIGN) * len(v.tensor_maps) + "iPP"
        tiles = grid[0] * grid[1] if splits > 1 else 0
        sync = backend.upload(np.zeros(max(1, 2 * tiles), np.int32))  # the kernel leaves it zeroed
        work = backend.alloc(4 * tiles * splits * params["BM"] * params["BN"])  # split-K's partial tiles
        keep += [sync, work]
        extra += (np.int32(bits), backend.ptr(sync), backend.ptr(work))
        path += copy_path(phased, fallback)
        if split:
            keep.append(split.work)
            path += ", B split first (split_b)"
    if splits > 1:
        grid = (grid[0], grid[1], splits)
        path += f", split-K {splits}"
    elif params.get("PERSISTENT"):
        grid = persistent_grid(grid, params.get("CLUSTER_M", 1), backend.device.sm_count)
        path += f", persistent {grid[0]}"
    smem = v.dynamic_smem_bytes(params)
    M, N, K = np.int32(shape.M), np.int32(shape.N), np.int32(shape.K)

    def launch_for(alpha: float, beta: float):
        main = backend.bind(kernel, grid, block, (M, N, K, np.float32(alpha), pa, pb, np.float32(beta), pc)
                            + extra, sig, smem=smem)
        if split:  # B as it is now, split at every launch: the GEMM never reads a split made for an earlier B
            first = split.launch
            return lambda: (keep, first(), main())[2]
        return lambda: (keep, main())[1]

    return launch_for, path


SPLIT_B_THREADS = 256  # kernels_cu/gemm/09_tf32x3_wgmma.cu's SPLIT_B_THREADS


@dataclass
class PresplitB:
    """Step 9's B split once per launch (SPLIT_B=1): `launch` runs `split_b`, which writes big = tf32(B) and,
    for 3xTF32, small = tf32(B - big) into `work`, each K-major with leading dimension `ld` (K rounded up to 4,
    rows past K zero), so that their maps always meet the 16-byte stride rule, whatever K."""
    work: object  # the workspace buffer: `copies` x ld x N floats
    ptr: int
    ld: int
    cols: int
    copies: int
    launch: object  # no-argument callable: split_b on the current B

    def maps(self, box: tuple[int, int], swizzle: int) -> bytes:
        """The kernel's B OperandMaps: m[0] over the big copy, m[1] over the small one (3xTF32), the rest 0."""
        size = 4 * self.ld * self.cols
        maps = b"".join(tensormap.encode_tiled(self.ptr + c * size, (self.ld, self.cols), (4 * self.ld,), box, swizzle)
                        for c in range(self.copies))
        return maps + bytes((PHASES - self.copies) * tensormap.MAP_BYTES)


def presplit_b(backend, kernel, params: dict[str, int], shape: Shape, pb: int) -> PresplitB:
    """SPLIT_B=1's workspace and its `split_b` launch (the GEMM kernel's own module: `kernel.sibling`)."""
    ld, copies = -(-shape.K // PHASES) * PHASES, 2 if params.get("PRECISION", 3) == 3 else 1
    work = backend.alloc(4 * copies * ld * shape.N)
    blocks = backend.device.stride_blocks(ld // 4 * shape.N, SPLIT_B_THREADS)  # a thread a quad of k
    launch = backend.bind(kernel.sibling("split_b"), (blocks, 1, 1), (SPLIT_B_THREADS, 1, 1),
                          (np.int32(shape.K), np.int32(shape.N), np.int32(ld), pb, backend.ptr(work)), "iiiPP")
    return PresplitB(work, backend.ptr(work), ld, shape.N, copies, launch)


@dataclass(frozen=True)
class WidePlan:
    """Step 9's transposed path for one shape (kernels_cu/gemm/09_wide.cuh): wgmma's n, warpgroups (64-column
    tiles of C^T) per block, slices of K and k-blocks per slice."""
    n: int
    groups: int
    splits: int
    per: int
    stages: int
    precision: int

    def smem(self) -> int:  # 09_wide.cuh's wide_smem_bytes
        return self.per * self.n * WIDE_BK * 4 * (2 if self.precision == 3 else 1) + \
            self.groups * self.stages * 64 * WIDE_XP * 4 + 1024


WIDE_MAX_M, WIDE_MIN_N, WIDE_BK, WIDE_XP = 128, 64 * 32, 32, 36


def wide_plan(shape: Shape, params: dict[str, int], sms: int, smem_limit: int) -> WidePlan | None:
    """The transposed path's launch for this shape, or None where the main kernel runs (ADAPT=0, clusters or
    a persistent loop asked for, M > 128, N under 32 tiles of 64 columns, or A^T's slice too large).
    C^T = B^T A^T puts N on wgmma's m: n = M rounded up to 8; two 64-column tiles a block where n >= 64 and K
    has 4 k-blocks or more (they share A^T's slice, the size of a warpgroup's share of B at M = 100: one tile a
    block 23.0 against 15.4 us; at K = 7 one tile a block 5.8 against 7.1-7.4 us, the H100 in one run); slices
    of K where the tiles leave SMs idle, each of at least 4 k-blocks, every slice of a tile resident at once
    (they meet), as few as let A^T's slice fit in shared memory."""
    if not params.get("ADAPT") or params.get("CLUSTER_M", 1) > 1 or params.get("PERSISTENT") \
            or shape.M > WIDE_MAX_M or shape.N < WIDE_MIN_N:
        return None
    n = -(-shape.M // 8) * 8
    k_blocks = -(-shape.K // WIDE_BK)
    groups = 2 if n >= 64 and k_blocks >= 4 else 1
    tiles = -(-shape.N // (64 * groups))
    most = max(1, min(k_blocks, sms // tiles))  # slices that stay resident together
    asked = params.get("SPLIT_K", 0)
    want = min(asked, most) if asked else max(1, min(k_blocks // 4, most))
    for splits in range(want, most + 1):
        per = -(-k_blocks // splits)
        plan = WidePlan(n, groups, -(-k_blocks // per), per, params.get("STAGES", 4), params.get("PRECISION", 3))
        if plan.smem() <= smem_limit:
            return plan
        if asked:
            break
    return None


def _wide_launch(backend, v: Variant, params: dict[str, int], shape: Shape, plan: WidePlan, pa: int, pb: int,
                 pc: int):
    """gemm_launch's answer for the transposed path: its own module (WIDE_N, WIDE_G), one launch."""
    module = _tile_module(backend, v, dict(params, WIDE_N=plan.n, WIDE_G=plan.groups))
    kernel = backend.load(module, "gemm_wide")
    grid = (-(-shape.N // (64 * plan.groups)), -(-shape.M // plan.n), plan.splits)
    tiles = grid[0] * grid[1] if plan.splits > 1 else 0
    sync = backend.upload(np.zeros(max(1, 2 * tiles), np.int32))  # the kernel leaves it zeroed
    work = backend.alloc(4 * tiles * plan.splits * 64 * plan.groups * plan.n)
    M, N, K = np.int32(shape.M), np.int32(shape.N), np.int32(shape.K)
    extra = (np.int32(plan.per), backend.ptr(sync), backend.ptr(work))
    path = f"C^T = B^T A^T here (M <= {WIDE_MAX_M}, N >= {WIDE_MIN_N}), wgmma n{plan.n}, {plan.groups} x 64 columns" \
        " a block, cp.async B"
    if plan.splits > 1:
        path += f", split-K {plan.splits}"

    def launch_for(alpha: float, beta: float):
        main = backend.bind(kernel, grid, (128 * plan.groups, 1, 1), (M, N, K, np.float32(alpha), pa, pb,
                            np.float32(beta), pc) + extra, SIGNATURE + "iPP", smem=plan.smem())
        return lambda: ((sync, work), main())[1]

    launch_for.ran = (kernel, 128 * plan.groups, plan.smem())  # for the record's resource columns
    return launch_for, path


def launched_kernel(v: Variant, params: dict[str, int], shape: Shape, device) -> str:
    """The kernel a launch of this case runs (`gemm_wide` where wide_plan takes the shape): what ncu profiles."""
    if v.tensor_maps and wide_plan(shape, params, device.sm_count, device.smem_per_block_optin) is not None:
        return "gemm_wide"
    return v.kernel


def launch_plan(v: Variant, params: dict[str, int], shape: Shape, sms: int) -> tuple[dict, str, tuple, int]:
    """What the main kernel launches for a case (not the transposed path): (the parameters, after step 9's
    rules where ADAPT=1; why they differ from the case's; the grid; the slices of K)."""
    tile, allow_split, why = step9_tile(shape, params, sms) if params.get("ADAPT") else (params, True, "")
    grid = v.launch_grid(tile, shape.as_dict())
    asked = tile.get("SPLIT_K", 0)
    splits = split_k(grid[0] * grid[1], -(-shape.K // tile.get("BK", 1)), sms, asked) \
        if v.split_k and (allow_split or asked) else 1
    return tile, why, grid, splits


TUNE_SPLITS = (0, 1, 2, 4)  # step 9's SPLIT_K values the autotuner times (0: the host's rule)
HOST_SIDE = ("ADAPT", "SPLIT_K")  # step 9's parameters that only the host reads: one cubin serves every value


def step9_candidates(v: Variant, params: dict[str, int], shape: Shape, device) -> list[dict]:
    """The launches the autotuner times for step 9 on a shape: ADAPT as the case has it and not (the host's
    rules, or BN as given and the main kernel always), each BN choice, SPLIT_K in TUNE_SPLITS; the case's own
    first; each kept only where it launches something no earlier candidate launches (the rules map several
    onto one launch: at 4096^3 every split asked for is none) and fits the device."""
    out, seen = [], set()

    def first(name: str, values) -> list[int]:
        return [params[name], *(x for x in values if x != params[name])]
    for adapt in first("ADAPT", v.param("ADAPT").choices):
        for bn in first("BN", v.param("BN").choices):
            for k in first("SPLIT_K", TUNE_SPLITS):
                p = dict(params, ADAPT=adapt, BN=bn, SPLIT_K=k)
                if v.problems(p) or v.device_problems(p, device, arch=False):
                    continue
                wide = wide_plan(shape, p, device.sm_count, device.smem_per_block_optin) if v.tensor_maps else None
                if wide is None:
                    tile, _, grid, n = launch_plan(v, p, shape, device.sm_count)
                    launched = (tuple(sorted((name, x) for name, x in tile.items() if name not in HOST_SIDE)), grid, n)
                else:
                    launched = ("wide", wide)
                if launched not in seen:
                    seen.add(launched)
                    out.append({"ADAPT": adapt, "BN": bn, "SPLIT_K": k})
    return out


def step9_tile(shape: Shape, params: dict[str, int], sms: int) -> tuple[dict[str, int], bool, str]:
    """Step 9's rules per shape (ADAPT=1): (the parameters to launch with, whether K may be split, why),
    from its measurements on the H100 (lab/journal/gemm.md, step 9 on small shapes; clusters):
    - M <= 64 (from BM = 128): BM = 64, one consumer warpgroup (7x4096x101: 11.9 -> 9.1 us with BN = 64);
    - N <= 64: BN = 64 (101x7x4096: 11.2 -> 9.9 us);
    - B by cp.async (K % 4 != 0) and M <= 64, or a 128-column grid that would leave half the SMs idle:
      BN = 64 (100x4096x501: 30.2 -> 23.2 us; 1000x777x1234: 57.5 -> 46.2 us; 7x4096x101 above);
    - B by cp.async and M <= 64: no split-K (7x4096x101: 26.0 -> 11.8 us).
    With SPLIT_B=1 B always comes by the copy engine (from its split workspace), so the cp.async rules do not apply."""
    by_copy = shape.K % PHASES != 0 and not params.get("SPLIT_B")
    tile, why = dict(params), []
    if shape.M <= 64 and params.get("BM") == 128:
        tile["BM"] = 64
        why.append("M <= 64")
    if params.get("BN") == 128:
        tiles = -(-shape.M // tile["BM"]) * -(-shape.N // 128)
        if shape.N <= 64:
            tile["BN"] = 64
            why.append("N <= 64")
        elif by_copy and (shape.M <= 64 or 2 * tiles <= sms):
            tile["BN"] = 64
            why.append("B by cp.async, few tiles")
    return tile, not (by_copy and shape.M <= 64), ", ".join(why)


def _tile_module(backend, v: Variant, params: dict[str, int]):
    """The variant's module with other tile parameters, built (or taken from the cache) for this launch; the
    host-side parameters at their defaults, so that the autotuner's splits share one cubin."""
    from nnbench.runtime.compile import variant_module
    defaults = v.defaults()
    return variant_module(v, dict(params, **{k: defaults[k] for k in HOST_SIDE if k in params}), backend.arch)


PHASES = 4  # A with a leading dimension not a multiple of 4 is mapped by 4 maps, one per k % 4
PATH_PHASED_A, PATH_LD_A_SHIFT = 4, 4  # wgmma_mainloop.cuh's PATH_PHASED_A and PATH_LD_A's bits


def operand_maps(ptr: int, rows: int, cols: int, box: tuple[int, int], swizzle: int,
                 phases: bool = True) -> tuple[bytes, bool] | None:
    """A column-major rows x cols operand's tensor maps, packed as the kernel's OperandMaps (PHASES maps),
    and whether they are phase maps; None where the kernel must take its cp.async path.

    One map where the leading dimension meets the maps' 16-byte stride rule. Otherwise, with `phases`,
    phase map r covers columns r, r + 4, ...: its stride, 4 rows floats, is a multiple of 16 bytes; it
    starts at the 16-byte aligned address at or below column r, lead_r = (r rows) % 4 floats before it,
    so its element (i, j) is the operand's (i - lead_r, 4j + r); its box is a quarter of the operand's
    along the columns."""
    if tensormap.tiled_problem(ptr, (rows, cols), (4 * rows,), box, swizzle) is None:
        return tensormap.encode_tiled(ptr, (rows, cols), (4 * rows,), box, swizzle) + \
            bytes((PHASES - 1) * tensormap.MAP_BYTES), False
    if not phases or cols < PHASES or box[1] % PHASES:
        return None
    maps = b""
    for r in range(PHASES):
        lead = r * rows % PHASES
        args = (ptr + 4 * (r * rows - lead), (rows + lead, -(-(cols - r) // PHASES)), (4 * PHASES * rows,),
                (box[0], box[1] // PHASES), swizzle)
        if tensormap.tiled_problem(*args) is not None:
            return None
        maps += tensormap.encode_tiled(*args)
    return maps, True


def persistent_grid(grid: tuple[int, int, int], cluster: int, sms: int) -> tuple[int, int, int]:
    """A persistent launch of a (tiles_m, tiles_n) grid: one block per SM at most (step 9 fits one), whole
    clusters, each block looping over every grid-size-th tile (kernels_cu/gemm/09_tf32x3_wgmma.cu)."""
    return min(grid[0] * grid[1], sms - sms % cluster), 1, 1


def split_k(tiles: int, k_blocks: int, sms: int, asked: int = 0) -> int:
    """How many slices of K a split-K kernel takes: where its tiles fill less than half the SMs, as many
    as fill them, each of at least 2 k-blocks, and no slice empty. `asked` (SPLIT_K > 0): that many, as far
    as every slice of every tile stays resident at once (the slices of a tile meet) and none is empty."""
    if asked:
        want = max(1, min(asked, sms // tiles, k_blocks))
    elif 2 * tiles > sms or k_blocks < 4:
        return 1
    else:
        want = max(1, min(sms // tiles, k_blocks // 2))
    per = -(-k_blocks // want)
    return -(-k_blocks // per)


def copy_path(phased: list[str], by_copy: list[str]) -> str:
    """How the operands reached shared memory, for the table: "TMA", with the operands whose leading
    dimension took four phase maps, or that fell back to the kernel's cp.async path."""
    out = "TMA" if len(by_copy) < 2 else ""
    if phased:
        out += f", {'+'.join(phased)} by 4 phase maps (leading dim % 4 != 0)"
    if by_copy:
        out = (out + ", " if out else "") + f"cp.async {'+'.join(by_copy)}"
    return out


class _SameModules:
    """The backend with `load` kept per module: the fresh-buffers launch that gemm_launch builds again for a step
    9 tile or the transposed path runs the very module the timed launches ran (its `__device__` state too), as
    every other row's does."""

    def __init__(self, backend) -> None:
        self._backend, self._loaded = backend, {}

    def __getattr__(self, name: str):
        return getattr(self._backend, name)

    def load(self, compiled, name: str):
        key = (getattr(compiled, "cubin", compiled), name)
        if key not in self._loaded:
            self._loaded[key] = self._backend.load(compiled, name)
        return self._loaded[key]


class _Operands:
    """A, B and C on the device: what a row's launch reads and writes."""

    def __init__(self, backend, A, B, C) -> None:
        self.backend, self.A, self.B, self.C = backend, A, B, C

    def ptrs(self) -> tuple:
        b = self.backend
        return (b.ptr(self.A), b.ptr(self.B), b.ptr(self.C)) if b.runs_kernels else (self.A, self.B, self.C)


class _Buffers(_Operands):
    """Device copies of one problem's operands and references; C is rewritten before every check."""

    def __init__(self, backend, prob: Problem) -> None:
        super().__init__(backend, backend.upload(prob.A), backend.upload(prob.B), backend.upload(prob.C0))
        self.prob = prob
        self._zero_error: float | None = None
        self.C0 = backend.upload(prob.C0)  # kept on the device: a reset is a device copy, not an upload
        self.count = prob.C0.size
        host = prob.refs or {(a, b): np.asfortranarray(prob.reference(a, b)) for a, b in CHECKS}
        self.refs = {k: backend.upload(v) for k, v in host.items()}
        self.mags = {k: backend.upload(v) for k, v in (prob.mags or prob.magnitudes()).items()}
        prob.refs = prob.mags = None  # the device holds them now

    def poison(self) -> None:
        self.backend.fill_nan(self.C, self.count)

    def reset(self) -> None:
        self.backend.copy(self.C, self.C0, self.prob.C0.nbytes)

    def error(self, alpha: float, beta: float) -> float:
        return self.backend.conditioned_error(self.C, self.refs[alpha, beta], self.mags[alpha, beta], self.count)

    def zero_error(self) -> float:
        """The error an all-zero C has, the larger over the checks: audit.zeros_pass's conditioned measure
        (max |reference| / magnitude), taken once per problem on the device, which holds the references."""
        if self._zero_error is None:
            zeros = self.backend.upload(np.zeros_like(self.prob.C0))
            self._zero_error = max(self.backend.conditioned_error(zeros, self.refs[k], self.mags[k], self.count)
                                   for k in CHECKS)
        return self._zero_error


CHECKS = ((1.0, 0.0), (VERIFY_ALPHA, VERIFY_BETA))


def _verify(bufs: _Buffers, make_launch) -> tuple[float, float]:
    """Run both checks; return the larger conditioned error and the checks' kernel milliseconds."""
    errs, ms = [], 0.0
    for alpha, beta in CHECKS:
        bufs.poison() if beta == 0 else bufs.reset()
        ms += bufs.backend.timed(make_launch(alpha, beta), 1)
        errs.append(bufs.error(alpha, beta))
    return max(errs), ms


def _last_batch(bufs: _Buffers, limit: float):
    """The timed launches' C (alpha 1, beta 0) poisoned before the last timed batch and checked after it
    (nnbench/audit.py): C is written only, so every launch of the batch leaves the same answer."""
    if not audit.enabled(audit.TIMED_OUTPUT):
        return None

    def check() -> str | None:
        err = bufs.error(1.0, 0.0)
        return None if err <= limit else (f"C after the last timed batch is wrong (error {err:.3g} > {limit:.3g}) "
                                          "where the check launches' was checked")
    return audit.LastBatch(bufs.poison, check)


def _fresh_failure(bufs: _Buffers, launch_for, build, limit: float) -> str | None:
    """The fresh-buffers check (nnbench/audit.py), after timing: C = A'B with A' = -A, launched as timed
    (alpha 1, beta 0) and checked, once on A', a copy of B and a poisoned C at other addresses (uploaded while
    the timed buffers are alive), made by `build`, and once with A' written into the timed A (the addresses the
    kernel has seen, new values; A is put back after). Negation is exact in float32 and every product only
    changes sign, so the exact answer is -AB: its reference is the float64 A @ B negated on the host, its
    magnitudes those of the (1, 0) check, and no second float64 GEMM is made. -AB is an answer the kernel has
    never given: one it cached and copies afterwards, whatever it keys the cache on (its pointers, the shape,
    alpha and beta), fails, where the first probe alone misses a cache keyed on the input pointers."""
    be, prob = bufs.backend, bufs.prob
    ref, mag = be.upload(np.negative(prob.ab, order="F")), bufs.mags[1.0, 0.0]
    fresh = _Operands(be, be.upload(np.negative(prob.A)), be.upload(prob.B), be.upload(prob.C0))  # column-major kept
    be.fill_nan(fresh.C, bufs.count)
    be.timed(build(fresh)(1.0, 0.0), 1)
    err = be.conditioned_error(fresh.C, ref, mag, bufs.count)
    if err > limit:
        return (f"on fresh buffers (-A, a copy of B, other addresses) C is wrong (error {err:.3g} > {limit:.3g}): "
                "the kernel depends on what it has seen")
    be.copy(bufs.A, fresh.A, prob.A.nbytes)
    try:
        bufs.poison()
        be.timed(launch_for(1.0, 0.0), 1)
        err = be.conditioned_error(bufs.C, ref, mag, bufs.count)
    finally:
        be.write(bufs.A, prob.A)
    return None if err <= limit else (
        f"with -A written into the A it was timed on, C is wrong (error {err:.3g} > {limit:.3g}): the kernel "
        "gives an answer it made before for the same addresses")


def _numpy_launcher(bufs: _Operands, alpha: float, beta: float):
    A, B, C = bufs.A, bufs.B, bufs.C
    if beta == 0 and alpha == 1:
        return lambda: np.matmul(A, B, out=C)
    return lambda: np.copyto(C, (alpha * (A @ B) + beta * C).astype(np.float32))


class GemmWorkload(Workload):
    name = "gemm"
    table = VARIANTS
    default_rtol = DEFAULT_RTOL
    vendor = "cublas"
    baseline = "naive"
    vendor_rows = ("cublas", "cublas-tf32")

    def parse_problems(self, path, node) -> list[Shape]:
        return gemm_shapes(path, node)

    def validate(self, problem: Shape) -> None:
        validate_shape(problem)

    def footprint(self, problem: Shape) -> tuple[float, float]:
        return footprint(problem)

    def session(self, backend, settings, rtol, seed, env, options=None) -> GemmSession:
        return GemmSession(backend, settings, rtol, seed, env)


WORKLOAD = GemmWorkload()
