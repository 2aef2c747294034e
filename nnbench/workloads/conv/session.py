"""The convolution workload (`nnbench conv`): layer shapes, the float64 reference, im2col, pooling,
and the forward paths of kernels_cu/conv/, each verified then timed, beside cuDNN.

Layout NCHW, fp32 (kernels_cu/conv/conv_common.cuh). A path is checked on fresh random non-zero
inputs with its output poisoned (NaN) first, against a float64 reference computed by im2col and a
float64 matrix product (the im2col itself is tested against a direct loop on the CPU): each output's
error against the magnitudes that enter it, within a limit from the row's precision and the reduction
length (nnbench/workloads/conv/bounds.py, docs/VERIFICATION.md). Knows nothing about click or rich.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nnbench import audit, measure, paths, registry
from nnbench.errors import KernelFault, NnbenchError
from nnbench.registry import Variant
from nnbench.runtime.autotune import label as case_label
from nnbench.runtime.compile import compile_sources, source_hash, variant_module
from nnbench.runtime.device import FFMA, TF32
from nnbench.runtime.vendor import cudnn_conv
from nnbench.workloads.base import Case, Session, Workload, problem_text
from nnbench.workloads.conv import bounds
from nnbench.workloads.conv.bounds import pool_backward_magnitude, pool_magnitude
from nnbench.workloads.conv.launch import (
    AUTOTUNED,
    BACKWARD_VENDORS,
    Layer,
    backward_candidates,
    direct_backward_launch,
    direct_launch,
    elementwise_grid,
    forward_candidates,
    implicit_backward,
    implicit_forward,
    unroll_backward_launch,
    unroll_launch,
)
from nnbench.workloads.conv.problem import DEFAULT_RTOL, ConvShape, load_sets, refusal
from nnbench.workloads.conv.reference import (
    conv_backward_reference,
    im2col,
    pool_backward_reference,
    pool_reference,
    random_nonzero,
)
from nnbench.workloads.conv.variants import VARIANTS
from nnbench.yamlnodes import fail, integer, mapping, sequence, string


# -- planning -------------------------------------------------------------------------------------
def plan(names: list[str], backend: str, overrides: dict[str, int]) -> list[tuple[Variant, dict]]:
    forward = ("forward",)
    pool = registry.of_workload(VARIANTS, "conv", backend, forward) + [
        v for v in registry.of_workload(VARIANTS, "conv", "cpu", forward) if backend == "cpu"]
    allowed = {v.name: v for v in registry.of_workload(VARIANTS, "conv", kinds=forward)}
    chosen = []
    for name in names or [v.name for v in dict.fromkeys(pool)]:
        if name not in allowed:
            raise NnbenchError(f"--path {name}: unknown; choose from {', '.join(allowed)}")
        v = allowed[name]
        if v.backend != backend and v.backend != "cpu":
            raise NnbenchError(f"--path {name}: needs a GPU; the {backend} backend runs: numpy")
        params = dict(v.defaults(), **{k: x for k, x in overrides.items() if v.param(k)})
        problems = v.problems(params)
        if problems:
            raise NnbenchError(problems[0])
        chosen.append((v, params))
    return sorted(chosen, key=lambda vp: vp[0].step)


def _base(shape, flops: float, rtol: float, seed: int, env: dict | None) -> dict:
    """The fields every row of a problem carries."""
    return dict(env or {}, workload="conv", shape=shape.label, problem=problem_text(shape), unit="launch", flops=flops,
                bytes=shape.bytes, rtol=rtol, seed=seed)


def _timed(backend, rec: dict, layer: Layer, launch, settings, rtol, build=None) -> dict:
    """A forward path verified (Y poisoned), then timed, then audited (_audits); `build(layer)` makes the same
    launch on another layer's buffers, for the fresh-buffers check (Layer.negated)."""
    poison = (lambda: backend.fill_nan(layer.Y, layer.count))
    poison()
    backend.timed(launch, 1)
    err = layer.error()
    stats = measure.measure(backend, launch, settings, _last_batch(poison, lambda: (layer.error(), rtol), "Y"))

    def fresh() -> str | None:
        other = layer.negated()
        return _fresh_failure(backend, build(other), lambda: backend.fill_nan(other.Y, other.count),
                              lambda: (other.error(), rtol), "Y")
    failures = _audits(backend, stats, {"X": (layer.x, layer.X), "filters": (layer.wt, layer.Wt)},
                       ["Y"] if audit.zeros_pass(layer.ref, rtol, _conditioned(layer.mag)) else [],
                       fresh if build else None)
    t = stats.median_ms * 1e-3
    s = layer.shape
    rec.update(stats.as_record(), gflops=s.flops / t / 1e9, gbs=s.bytes / t / 1e9, rel_err=err,
               status="PASS" if err <= rtol else "FAIL")
    return audit.judge(rec, failures)


# -- the defenses against a kernel that games the timer (nnbench/audit.py) ------------------------------------
def _last_batch(poison, check, what: str) -> audit.LastBatch | None:
    """The outputs poisoned before the last timed batch and checked after it (`check()` gives (error, limit)):
    a path's outputs are written only, so every launch of the batch leaves the same answer."""
    if not audit.enabled(audit.TIMED_OUTPUT):
        return None

    def checked() -> str | None:
        err, limit = check()
        return None if err <= limit else (f"{what} after the last timed batch is wrong (error {err:.3g} > "
                                          f"{limit:.3g}) where the check launch's was right")
    return audit.LastBatch(poison, checked)


def _conditioned(magnitude: np.ndarray):
    """The check's measure for audit.zeros_pass: the conditioned error against these magnitudes."""
    return lambda out, ref: measure.conditioned_error(out, ref, magnitude)


def _fresh_failure(backend, launch, poison, check, what: str) -> str | None:
    """One launch on fresh buffers (other values, other addresses), its outputs poisoned first, checked."""
    poison()
    backend.timed(launch, 1)
    err, limit = check()
    return None if err <= limit else (f"on fresh buffers (other values, other addresses) {what} is wrong (error "
                                      f"{err:.3g} > {limit:.3g}): the path depends on what it has seen")


def _audits(backend, stats, inputs: dict, blind: list[str], fresh) -> list[tuple[str, str | None]]:
    """The checks after timing, each (defense, why it failed or None): the last batch's and the device's wait
    after it (from `stats`), the inputs ({name: (host copy, buffer)}) unchanged, no output an all-zero one would
    pass (`blind`), and `fresh()` (None: no fresh-buffers check)."""
    out = audit.timed_findings(stats)
    if audit.enabled(audit.INPUTS_UNCHANGED):
        edited = audit.changed({k: h for k, (h, _) in inputs.items()},
                               {k: backend.download(b, h) for k, (h, b) in inputs.items()})
        out.append((audit.INPUTS_UNCHANGED, edited and f"the path changed {' and '.join(edited)} while it was timed"))
    if audit.enabled(audit.ZERO_OUTPUT):
        out.append((audit.ZERO_OUTPUT, blind and f"an all-zero {' and '.join(blind)} would pass this check (the "
                    "limit is at least the largest |reference| over its magnitudes): give a smaller --rtol"))
    if audit.enabled(audit.FRESH_BUFFERS) and fresh is not None:
        out.append((audit.FRESH_BUFFERS, fresh()))
    return out


def _numpy(rec: dict, layer: Layer, rtol: float, settings=None, drop_tap: bool = False) -> dict:
    """The CPU path: im2col and a float32 BLAS product per image, checked like a GPU path, then timed by
    `measure` as every other row is (a single timing had no spread, so the gate called every CPU conv row
    INVALID); `settings` None: timed once (the CPU tests' many draws). `drop_tap`: the centre tap of every
    filter left out, which every output meets: the planted defect of the CPU tests."""
    s = layer.shape
    w2 = layer.wt.reshape(s.K, -1)
    if drop_tap:
        w2 = np.where(np.arange(w2.shape[1]) % (s.R * s.R) == s.R * s.R // 2, np.float32(0), w2)
    y = np.full(layer.ref.shape, np.nan, np.float32)

    def forward():
        u = im2col(layer.x, s.R, s.stride, s.pad)
        y[...] = np.stack([w2 @ u[n] for n in range(s.N)]).reshape(layer.ref.shape)

    import time
    from dataclasses import replace
    t0 = time.perf_counter()
    forward()
    one_s = time.perf_counter() - t0
    err = measure.conditioned_error(y, layer.ref, layer.mag)
    if settings is None:
        ms = 1e3 * one_s
        rec.update(median_ms=ms)
    else:
        # A ResNet layer takes ~1 s in NumPy: ten samples of it made `conv --set resnet` take 96 s on 2 cores.
        # Where the budget holds fewer, 3 samples (still a median and a spread that the gate can read).
        fit = max(3, min(settings.min_samples, int(settings.budget_s / one_s)))
        stats = measure.measure(layer.be, forward, replace(settings, min_samples=fit))
        ms = stats.median_ms
        rec.update(stats.as_record())
    rec.update(gflops=s.flops / ms / 1e6, gbs=s.bytes / ms / 1e6, rel_err=err,
               status="PASS" if err <= rtol else "FAIL")
    return rec


def pool_check(backend, mode: str, x: np.ndarray, S: int) -> float:
    """Run 05_pool.cu (MODE avg or max) on `x` with the output poisoned; its conditioned error, whose limit is
    bounds.pool_limit(mode, S)."""
    v = registry.find(VARIANTS, "conv", mode)
    (comp,) = compile_sources(backend.arch, [(v.source, v.defaults())])
    N, C, H, W = x.shape
    ref = pool_reference(x, S, mode)
    X, Y = backend.upload(x.astype(np.float32)), backend.upload(np.zeros(ref.shape, np.float32))
    backend.fill_nan(Y, ref.size)
    backend.launch(backend.load(comp, v.kernel), elementwise_grid(backend, ref.size), (256, 1, 1),
                   (np.int32(N), np.int32(C), np.int32(H), np.int32(W), np.int32(S), X, Y))
    return measure.conditioned_error(backend.download(Y, np.zeros(ref.shape, np.float32)), ref,
                                     pool_magnitude(x, S, mode))


def pool_backward_check(backend, mode: str, x: np.ndarray, S: int) -> float:
    """05_pool.cu's pool_backward against the float64 reference (dX poisoned except the cut-off
    edge, which the host zeroes as the kernel's contract says): the conditioned error, within
    bounds.pool_limit(mode, S)."""
    v = registry.find(VARIANTS, "conv", mode)
    (comp,) = compile_sources(backend.arch, [(v.source, v.defaults())])
    N, C, H, W = x.shape
    dy = random_nonzero(np.random.default_rng(5), (N, C, H // S, W // S))
    ref = pool_backward_reference(x, dy, S, mode)
    init = np.full(x.shape, np.nan, np.float32)
    init[:, :, (H // S) * S:, :] = 0.0
    init[:, :, :, (W // S) * S:] = 0.0
    X, DY, DX = backend.upload(x.astype(np.float32)), backend.upload(dy), backend.upload(init)
    backend.launch(backend.load(comp, "pool_backward"), elementwise_grid(backend, dy.size), (256, 1, 1),
                   (np.int32(N), np.int32(C), np.int32(H), np.int32(W), np.int32(S), X, DY, DX))
    return measure.conditioned_error(backend.download(DX, np.zeros(x.shape, np.float32)), ref,
                                     pool_backward_magnitude(x, dy, S, mode))


# -- the workload ---------------------------------------------------------------------------------
def _torch_row(variant: str) -> str:
    """The PyTorch row a LeNet-5 row is compared with: its forward with PyTorch's forward, a step with
    PyTorch's step."""
    return "torch-forward" if variant.endswith("forward") else "torch-step"


@dataclass(frozen=True)
class LeNetProblem:
    """LeNet-5's whole SGD step on a batch of letter images (nnbench/workloads/conv/lenet.py)."""

    batch: int = 64
    rate: float = 0.05

    @property
    def label(self) -> str:
        return f"LeNet-5 B={self.batch}"

    def as_dict(self) -> dict:
        return {"model": "lenet5", "batch": self.batch, "rate": self.rate}

    @property
    def flops(self) -> float:
        return 0.0

    @property
    def bytes(self) -> float:
        return 0.0


class ConvSession(Session):
    """Per layer: inputs, the float64 forward reference and (for the backward paths, made on first
    use) dY and the float64 data and filter gradients, all on the device; cuDNN as the vendor row."""

    def __init__(self, backend, settings, rtol: float, seed: int, env: dict) -> None:
        self.backend, self.settings, self.rtol, self.seed, self.env = backend, settings, rtol, seed, env
        self.layer: Layer | None = None
        self.grads: dict | None = None
        self._helpers: dict[str, object] = {}
        self.lenet = None  # lenet.LeNetRun of the LeNet-5 problem at hand
        self._rows: dict[tuple, list[dict]] = {}  # (variant, shape) -> the rows measured with that record

    def base_record(self, problem) -> dict:
        return _base(problem, problem.flops, self.rtol, self.seed, self.env)

    def prepare(self, problem, following=None) -> None:
        if isinstance(problem, ConvShape) and (self.layer is None or self.layer.shape != problem):
            self.layer, self.grads = None, None
            self.layer = Layer(self.backend, problem, self.seed)
        if isinstance(problem, LeNetProblem) and (self.lenet is None or self.lenet_problem != problem):
            from nnbench.workloads.conv import lenet
            self.lenet = lenet.LeNetRun(self.backend, problem.batch, problem.rate, self.seed, self.settings, self.env)
            self.lenet_problem = problem

    def breakdown(self, rec: dict) -> list[dict]:
        """A LeNet-5 record as the command shows it: the path's rows (its forward, its step launched,
        host-issued and as a graph) or PyTorch's forward and step, each compared with PyTorch's own."""
        rows = self._rows.pop((rec.get("variant"), rec.get("shape")), None)
        if rows is None:
            return [rec]
        return [dict(r, vendor=r.get("vendor") or _torch_row(r["variant"])) for r in rows]

    def time_split(self, kind: str, case: Case, problem: LeNetProblem):
        from nnbench.workloads.conv import lenet, stages
        self.prepare(problem)
        return stages.stage_split(self.lenet, lenet.VARIANT_PATHS[case.variant.name])

    def helper(self, v: Variant):
        """A module a path needs beside its own (the unroll path's GEMM, the backward's unroll)."""
        key = f"{v.workload}/{v.name}"
        if key not in self._helpers:
            (self._helpers[key],) = compile_sources(self.backend.arch, [(v.source, v.defaults())])
        return self._helpers[key]

    def run_vendor(self, name: str, problem) -> dict | None:
        if name == "torch" and isinstance(problem, LeNetProblem):
            self.prepare(problem)
            rows = self.lenet.torch_rows()
            row = next((r for r in rows if r["variant"] in ("torch-step", "torch")), None)
            rec = dict(row, variant="torch", shape=problem.label, problem=problem_text(problem), unit="step")
            self._rows[rec["variant"], rec["shape"]] = rows
            return rec
        if name in BACKWARD_VENDORS and isinstance(problem, ConvShape):
            return self._cudnn_backward(name, problem)
        if name not in ("cudnn", "cudnn-tf32") or not isinstance(problem, ConvShape):
            return None
        layer = self.layer
        s = problem
        tf32 = name == "cudnn-tf32"  # a labelled row for context; the FP32 row is the baseline
        draws = cudnn_conv(int(layer.X), int(layer.Wt), (s.N, s.C, s.H, s.W, s.K, s.R), s.stride, s.pad,
                           (int(layer.Y),), tf32=tf32)
        rec = dict(self.base_record(problem), variant=name, step="", precision=TF32 if tf32 else FFMA,
                   params=f"torch conv2d, cudnn.benchmark ({AUTOTUNED}), TF32 {'on' if tf32 else 'off'}, "
                          "its own output")
        limit = bounds.forward_limit(rec["precision"], s) if self.rtol is None else self.rtol
        return self._cudnn_row(rec, draws, lambda: self.backend.fill_nan(layer.Y, layer.count),
                               lambda: (layer.error(), limit))

    def _cudnn_row(self, rec: dict, draws, poison, check) -> dict:
        """A cuDNN row: every autotune draw (vendor.AUTOTUNE_DRAWS) timed by `measure`, whose warm-up
        runs its autotuning; the fastest kept, its outputs poisoned, made again and verified. Which
        draw was kept, each draw's time and its kernels (the algorithm it chose, named after the
        timing) go to `tiles`: they differ between processes, so they stay out of `params`, which
        names the case. `check` gives (error, limit) of the outputs."""
        if draws is None:
            return dict(rec, status="SKIP", error="PyTorch is not installed")
        timed = [(measure.measure(self.backend, d.launch, self.settings), d) for d in draws]
        stats, best = min(timed, key=lambda sd: sd[0].median_ms)
        notes = "; ".join(f"{d.label} {s.median_ms:.4f} ms: {d.kernels()}" for s, d in timed)
        poison()
        best.launch()
        best.result()
        err, limit = check()
        return dict(rec, **stats.as_record(), rel_err=err, rtol=limit, status="PASS" if err <= limit else "FAIL",
                    tiles=f"kept {best.label} · {notes}")

    def run_case(self, case: Case, problem, compiled) -> dict:
        v, params = case.variant, case.param_dict
        rec = dict(self.base_record(problem), variant=v.name, step=v.step, params=case.param_label,
                   precision=v.precision)
        if v.runner == "lenet":
            from nnbench.workloads.conv import lenet
            self.prepare(problem)
            path = lenet.VARIANT_PATHS[v.name]
            rows = self.lenet.path_rows(path)
            row = next(r for r in rows if r["variant"] == lenet.row_name(path, "step"))
            rec = dict(rec, **{k: row.get(k) for k in ("median_ms", "iqr_ms", "samples", "rel_err", "rtol", "status",
                                                       "error")}, unit="step")
            self._rows[rec["variant"], rec["shape"]] = rows
            return rec
        device = getattr(self.backend, "device", None)
        if device is not None and (why := v.arch_problem(device)):
            return dict(rec, status="SKIP", error=why)
        if isinstance(compiled, Exception):
            return dict(rec, status="ERROR", error=str(compiled))
        layer = self.layer
        if v.kind == "backward":
            return self._backward(rec, v, params, compiled, layer)
        rec["workspace_bytes"] = problem.unroll_bytes if v.runner in ("unroll", "numpy") else 0
        if self.rtol is None:
            rec["rtol"] = bounds.forward_limit(v.precision, problem)
        if v.backend == "cpu":
            return _numpy(rec, layer, rec["rtol"], self.settings)
        try:
            if v.runner == "implicit":
                def make(p, comp, split, lay=layer):
                    return implicit_forward(self.backend, v, p, comp, problem, lay.X, lay.Wt, lay.Y,
                                            slices=split.get("SPLIT"))
                launch, path, build = self._tuned(rec, v, params, compiled, problem, make, forward_candidates)
                rec["params"] = f"{rec['params']} · {path}"
            else:
                def build(lay: Layer):
                    if v.runner == "unroll":
                        return unroll_launch(self.backend, compiled, self.helper(registry.TF32X3_GEMM), lay)
                    return direct_launch(self.backend, v, params, compiled, lay)
                launch = build(layer)
            return _timed(self.backend, rec, layer, launch, self.settings, rec["rtol"], build)
        except KernelFault as e:
            return dict(rec, status="ERROR", error=f"kernel fault: {e}", fault=True)

    def _tuned(self, rec: dict, v: Variant, params: dict, compiled, shape: ConvShape, make, candidates):
        """(launch, path, build) of an implicit-GEMM path: its case's tile, or, under the autotuner
        (nnbench/runtime/autotune.py), the candidate it chose for this layer, whose parameters then
        replace the case's in the record's `params` and whose choice goes to `tuned`. `make(params,
        module, splits, *buffers)` builds a launch; the candidates' keys that are not parameters are its splits.
        `build(*buffers)` makes the same launch on other buffers (the fresh-buffers check)."""
        tuner = self.tuner
        if tuner is None or not tuner.takes(v):
            return (*make(params, compiled, {}), lambda *bufs: make(params, compiled, {}, *bufs)[0])
        device = self.backend.device

        def split(c: dict) -> tuple[dict, dict]:
            return dict(params, **{k: x for k, x in c.items() if k in params}), \
                {k: x for k, x in c.items() if k not in params}

        def module(p: dict):
            if why := v.device_problems(p, device):
                raise NnbenchError(why[0])
            return compiled if p == params else variant_module(v, p, self.backend.arch)

        def build(c: dict):
            p, splits = split(c)
            return make(p, module(p), splits)[0]
        choice = tuner.choose(f"{v.workload}/{v.name} {case_label(params)}", source_hash(paths.KERNELS / v.source),
                              shape.label, candidates(v, params, shape, device.sm_count), build)
        p, splits = split(choice.params)
        rec.update(params=f"{case_label(p)} · tuned ({choice.how})", tuned=choice.marker())  # the table says so too
        chosen = module(p)
        return (*make(p, chosen, splits), lambda *bufs: make(p, chosen, splits, *bufs)[0])

    def _gradients(self) -> dict:
        """This layer's dY, the float64 dX and dW for it, and the output buffers, made on first use."""
        be, layer = self.backend, self.layer
        shape = layer.shape
        if self.grads is None:
            rng = np.random.default_rng([self.seed, 7, shape.N, shape.K])
            dy = random_nonzero(rng, layer.ref.shape)
            dx_ref, dw_ref = conv_backward_reference(layer.x, layer.wt, dy, shape.stride, shape.pad)
            dx_mag, dw_mag = bounds.backward_magnitudes(layer.x, layer.wt, dy, shape.stride, shape.pad)
            self.grads = dict(dY=be.upload(dy), dX=be.upload(np.zeros(layer.x.shape, np.float32)),
                              dW=be.upload(np.zeros(layer.wt.shape, np.float32)), DX=be.upload(dx_ref),
                              DW=be.upload(dw_ref), MDX=be.upload(dx_mag), MDW=be.upload(dw_mag),
                              host=dict(dy=dy, dx=dx_ref, dw=dw_ref, mdx=dx_mag, mdw=dw_mag))
        return self.grads

    def _negated_gradients(self) -> tuple[Layer, dict]:
        """The backward problem with dY negated, X and the filters as they are, all in buffers of their own (at
        other addresses): dX and dW are linear in dY and negation is exact, so their references are exactly -DX
        and -DW and the magnitudes are the same (the fresh buffers of nnbench/audit.py)."""
        be, host, layer = self.backend, self.grads["host"], copy.copy(self.layer)
        layer.X, layer.Wt = be.upload(layer.x), be.upload(layer.wt)
        bufs = dict(self.grads, dY=be.upload(-host["dy"]), dX=be.upload(np.zeros(layer.x.shape, np.float32)),
                    dW=be.upload(np.zeros(layer.wt.shape, np.float32)), DX=be.upload(-host["dx"]),
                    DW=be.upload(-host["dw"]))
        return layer, bufs

    def _grad_check(self, precision: str | None, bufs: dict | None = None) -> tuple[float, float]:
        """(error, limit) of dX or dW, whichever is nearer its limit: each gradient's conditioned error against the
        limit of its own reduction length (K*R*S for dX, N*P*Q for dW), or the run's rtol where one is set."""
        be, layer = self.backend, self.layer
        bufs = self.grads if bufs is None else bufs
        lim_dx, lim_dw = self._grad_limits(precision)
        return bounds.worst([(be.conditioned_error(bufs["dX"], bufs["DX"], bufs["MDX"], layer.x.size), lim_dx),
                             (be.conditioned_error(bufs["dW"], bufs["DW"], bufs["MDW"], layer.wt.size), lim_dw)])

    def _grad_limits(self, precision: str | None) -> tuple[float, float]:
        return bounds.backward_limits(precision, self.layer.shape) if self.rtol is None else (self.rtol,) * 2

    def _cudnn_backward(self, name: str, problem: ConvShape) -> dict:
        """cuDNN's data and filter gradients (one autograd call), verified against float64 as our
        backward paths are; the baseline of their % vendor."""
        tf32 = name.endswith("tf32")
        s, be = problem, self.backend
        bufs = self._gradients()
        rec = dict(self.base_record(problem), variant=name, step="", precision=TF32 if tf32 else FFMA,
                   flops=2 * s.flops, vendor="cudnn-backward",
                   params=f"torch convolution_backward, cudnn.benchmark ({AUTOTUNED}), TF32 {'on' if tf32 else 'off'}, "
                          "its own outputs")
        draws = cudnn_conv(int(self.layer.X), int(self.layer.Wt), (s.N, s.C, s.H, s.W, s.K, s.R), s.stride, s.pad,
                           (int(bufs["dX"]), int(bufs["dW"])), tf32=tf32, dy_ptr=int(bufs["dY"]))

        def poison() -> None:
            be.fill_nan(bufs["dX"], self.layer.x.size)
            be.fill_nan(bufs["dW"], self.layer.wt.size)
        return self._cudnn_row(rec, draws, poison, lambda: self._grad_check(rec["precision"]))

    def _backward(self, rec: dict, v: Variant, params: dict, comp, layer: Layer) -> dict:
        """dX and dW both checked against float64 (both poisoned first; the error is the larger),
        then the whole backward pass timed."""
        be, shape = self.backend, layer.shape
        bufs = self._gradients()
        rec.update(flops=2 * shape.flops, workspace_bytes=shape.unroll_bytes * 2 if v.runner == "unroll" else 0)
        rec["vendor"] = "cudnn-backward"
        try:
            if v.runner == "implicit":
                def make(p, module, split, lay=layer, b=bufs):
                    return implicit_backward(be, v, p, module, shape, lay.X, lay.Wt, b["dY"], b["dX"],
                                             b["dW"], filter_split=split.get("FILTER_SPLIT"),
                                             data_split=split.get("DATA_SPLIT"))
                launch, path, build = self._tuned(rec, v, params, comp, shape, make, backward_candidates)
                rec["params"] = f"{rec['params']} · {path}"
            else:
                def build(lay: Layer, b: dict):
                    if v.runner == "unroll":
                        unroll = self.helper(registry.find(VARIANTS, "conv", "unroll"))
                        return unroll_backward_launch(be, v, params, comp, unroll, lay, b)
                    return direct_backward_launch(be, params, comp, lay, b)
                launch = build(layer, bufs)

            def poison(b: dict = bufs) -> None:
                be.fill_nan(b["dX"], layer.x.size)
                be.fill_nan(b["dW"], layer.wt.size)
            poison()
            be.timed(launch, 1)
            err, limit = self._grad_check(v.precision)
            stats = measure.measure(be, launch, self.settings,
                                    _last_batch(poison, lambda: self._grad_check(v.precision), "dX or dW"))

            def fresh() -> str | None:
                other, b = self._negated_gradients()
                return _fresh_failure(be, build(other, b), lambda: poison(b), lambda: self._grad_check(v.precision, b),
                                      "dX or dW")
            host, (lim_dx, lim_dw) = bufs["host"], self._grad_limits(v.precision)
            blind = [name for name, ref, mag, lim in (("dX", host["dx"], host["mdx"], lim_dx),
                                                      ("dW", host["dw"], host["mdw"], lim_dw))
                     if audit.zeros_pass(ref, lim, _conditioned(mag))]
            failures = _audits(be, stats, {"X": (layer.x, layer.X), "filters": (layer.wt, layer.Wt),
                                           "dY": (host["dy"], bufs["dY"])}, blind, fresh)
        except KernelFault as e:
            return dict(rec, status="ERROR", error=f"kernel fault: {e}", fault=True)
        return audit.judge(dict(rec, **stats.as_record(), rel_err=err, rtol=limit,
                                status="PASS" if err <= limit else "FAIL"), failures)


class ConvWorkload(Workload):
    name = "conv"
    table = VARIANTS
    default_rtol = DEFAULT_RTOL
    vendor = "cudnn"
    baseline = "direct"
    vendor_rows = ("cudnn", "cudnn-tf32", "torch", *BACKWARD_VENDORS)
    splits = {"stages": "a whole model's step, stage by stage (each layer's forward and backward, bias and ReLU, "
                        "the pools, the loss, the update), each timed alone by measure"}

    def vendor_wanted(self, name: str, cases: list[Case]) -> bool:
        """cuDNN's backward rows only where a backward path runs."""
        return name not in BACKWARD_VENDORS or any(c.variant.kind == "backward" for c in cases)

    def variants(self, backend: str | None = None) -> list[Variant]:
        return registry.of_workload(VARIANTS, "conv", backend, ("forward", "backward", "model"))

    def applies(self, case: Case, problem) -> bool:
        return (case.variant.runner == "lenet") == isinstance(problem, LeNetProblem)

    def refusal(self, case: Case, problem) -> str | None:
        return refusal(case.variant, case.param_dict, problem) if isinstance(problem, ConvShape) else None

    def split_refusal(self, kind: str, case: Case, problem) -> str | None:
        from nnbench.workloads.conv import stages
        return stages.refusal(case.variant, isinstance(problem, LeNetProblem),
                              [v.name for v in self.variants() if v.runner == "lenet"])

    def parse_problems(self, path: Path, node) -> list:
        """{set: resnet} (configs/conv.yaml), [N, C, H, W, K, R, stride, pad], or {model: lenet5, batch: B}."""
        import yaml
        if isinstance(node, yaml.SequenceNode):
            dims = [integer(path, d, "shapes", minimum=0) for d in sequence(path, node, "shapes")]
            if len(dims) not in (6, 7, 8):
                raise fail(path, node, "shapes: expected [N, C, H, W, K, R] with optional stride and pad")
            return [ConvShape(*dims)]
        keys = mapping(path, node, "shapes", ["set", "model", "batch"])
        if "model" in keys:
            string(path, keys["model"][1], "shapes.model", ["lenet5"])
            batch = integer(path, keys["batch"][1], "shapes.batch", minimum=1) if "batch" in keys else 64
            return [LeNetProblem(batch)]
        if "set" not in keys:
            raise fail(path, node, "shapes: expected {set: NAME}, {model: lenet5} or [N, C, H, W, K, R, stride, pad]")
        known = load_sets()
        return known[string(path, keys["set"][1], "shapes.set", list(known))]

    def validate(self, problem) -> None:
        if isinstance(problem, ConvShape):
            problem.validate()

    def footprint(self, problem) -> tuple[float, float] | None:
        return problem.footprint() if isinstance(problem, ConvShape) else None

    def session(self, backend, settings, rtol, seed, env, options=None) -> ConvSession:
        return ConvSession(backend, settings, rtol, seed, env)


WORKLOAD = ConvWorkload()
