"""The `kernel` workload: a user's own .cu file, declared in YAML, on the workload contract.

A kernel config (examples/vector_add/vector_add.yaml) says which source and kernel to run, its
arguments in order (arrays with a dtype and a shape written in the problem axes, generated or read
from .npy; scalars; which arrays are checked outputs), the launch geometry as expressions over the
parameters and problem axes, the parameter axes and restrictions (as a sweep's), the problem axes,
FLOP and byte formulas, the reference (a float64 Python function in the user's own file,
`module:function` beside the config or `PATH.py:function`, or another variant of the same config
named as the baseline) and the tolerance.

Everything a mistake can be found in is checked when the file is loaded, so it is one
`file:line: key: problem; allowed: ...` line and exit 2: the kernel name against the entries nvcc
emits for the file, the argument count and kinds against the entry's PTX parameter list, the
launch geometry of every case and problem against CUDA's limits, each .npy input's header against
every problem, and the reference's file, read and parsed for the function (nnbench/usercode.py).
Loading runs no user code: the reference runs only in a case, in the worker under the watchdog, and
its mistakes (an exception, SystemExit, a wrong output shape) are that case's ERROR row.

The rest is the contract's: the sweep runs the cases in a worker (a fault or a hang is an ERROR row
and the sweep goes on), verifies each with its outputs poisoned (NaN) first, times it through
`measure`, resumes, and the gate and reports read its records like any other workload's. The config
travels with each job: a case's variant is a `KernelVariant` (the registry's Variant plus include
folders) and a problem carries its `KernelSpec`, so the worker needs nothing but the job.

On the CPU backend no kernel runs: the reference is timed and verified against itself, and every
row says so (there is nothing else to check a user's CUDA against without a GPU).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import operator
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import yaml

from nnbench import audit, expr, measure, memory, paths, safeio, space, usercode
from nnbench.errors import CompileError, KernelFault, NnbenchError
from nnbench.options import SEED_MAX
from nnbench.registry import Param, Variant
from nnbench.runtime.device import FFMA, PRECISIONS
from nnbench.workloads.base import REFERENCE, REFERENCE_VARIANT, Case, Session, Workload, problem_text, variant_cases
from nnbench.yamlnodes import OLD_KEYS, ConfigError, fail, integer, mapping, number, scalar, sequence, string, where

SUITE = "kernel"
# dtype -> (PyCUDA's struct code for a scalar of it, the PTX parameter types that may hold it)
SCALARS = {"int32": ("i", {"u32", "s32", "b32"}), "uint32": ("I", {"u32", "s32", "b32"}),
           "int64": ("q", {"u64", "s64", "b64"}), "uint64": ("Q", {"u64", "s64", "b64"}),
           "float32": ("f", {"f32", "b32"}), "float64": ("d", {"f64", "b64"})}
ARRAYS = ["float16", "float32", "float64", "int8", "uint8", "int32", "uint32", "int64", "uint64"]
POINTER = {"u64", "b64", "s64"}
INITS = ["normal", "uniform", "npy", "zeros", "ones"]
TOP_KEYS = ["name", "workload", "description", "source", "include", "args", "variants", "problems", "flops", "bytes",
            "reference", "baseline", "rtol", "precision", "seed", "timing", "arch", "strategy", "budget"]
VARIANT_KEYS = ["kernel", "source", "grid", "block", "shared", "axes", "restrict", "summary"]
ARG_KEYS = ["name", "array", "scalar", "shape", "value", "init", "seed", "output"]
DEFAULT_RTOL = "1e-5"  # float32 sums of a few hundred terms; a config states its own (see the examples)
CHECK_ARCH = "sm_90"  # the PTX the signature is read from, unless the config names `arch`
# CUDA's launch limits, the same on every architecture nnbench runs on (compute capability >= 7.0)
MAX_BLOCK = (1024, 1024, 64)
MAX_THREADS = 1024
MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_PROBLEMS = 10_000  # a config's problems, crossed: each is built, checked and run; more is a mistake


# -- the declaration --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Arg:
    name: str
    kind: str  # "array" or "scalar"
    dtype: str
    shape: tuple[str, ...] = ()  # arrays: expressions over the problem axes
    value: str = ""  # scalars: an expression over the parameters and problem axes
    init: tuple = ("normal", 0.0, 1.0)  # ("normal", mean, std) | ("uniform", lo, hi) | ("npy", path) | ("zeros",)
    seed: int = 0
    output: bool = False  # checked against the reference
    written_only: bool = False  # an output with no init: poisoned with NaN before each check
    where: str = ""


@dataclass(frozen=True)
class KernelSpec:
    """What a problem needs to build its inputs and reference, and to count its work."""

    name: str
    path: str
    args: tuple[Arg, ...]
    flops: str
    bytes: str
    rtol: str
    seed: int
    reference: str = ""  # "module:function" or "PATH.py:function", as the config wrote it
    ref_dir: str = ""
    baseline: str = ""  # or a variant of this config whose outputs are the reference
    where_reference: str = ""
    baseline_case: Case | None = None  # that variant at its defaults
    reference_file: str = ""  # the Python file `reference` names (nnbench/usercode.py), checked at load

    @property
    def outputs(self) -> list[Arg]:
        return [a for a in self.args if a.output]


@dataclass(frozen=True)
class KernelVariant(Variant):
    includes: tuple[str, ...] = ()  # the config's `include:` folders, for nvcc's -I


@dataclass(frozen=True)
class KernelProblem:
    axes: tuple[tuple[str, int], ...]
    spec: KernelSpec = field(compare=False, hash=False, repr=False)

    def as_dict(self) -> dict[str, int]:
        return dict(self.axes)

    @property
    def label(self) -> str:
        return "×".join(str(v) for _, v in self.axes) if len(self.axes) > 1 else problem_text(self)

    @property
    def flops(self) -> float:
        return float(expr.evaluate(self.spec.flops, self.as_dict()))

    @property
    def bytes(self) -> float:
        return float(expr.evaluate(self.spec.bytes, self.as_dict()))

    def shape_of(self, arg: Arg) -> tuple[int, ...]:
        return tuple(expr.evaluate_whole(s, self.as_dict()) for s in arg.shape)

    def rtol(self) -> float:
        return float(expr.evaluate(self.spec.rtol, self.as_dict()))


# -- inputs and the reference ------------------------------------------------------------------------
FRESH = 0x46524553  # tags a second draw of the inputs (the fresh-buffers check): never a first draw's seed


def make_inputs(problem: KernelProblem, draw: int = 0) -> dict[str, np.ndarray]:
    """Every array argument's initial contents (written-only outputs: zeros, poisoned before use).
    Each comes from a generator seeded by (config seed, argument seed, position, problem axes), so a
    fresh worker rebuilds exactly the same problem. `draw` > 0: another set of the same distributions
    (.npy, zeros and ones stay as they are), for the check on fresh buffers (nnbench/audit.py)."""
    out = {}
    spec = problem.spec
    for i, a in enumerate(spec.args):
        if a.kind != "array":
            continue
        shape = problem.shape_of(a)
        rng = np.random.default_rng([spec.seed, a.seed, i, *(v for _, v in problem.axes)]
                                    + ([FRESH, draw] if draw else []))
        kind = a.init[0]
        if kind == "normal":
            x = rng.normal(a.init[1], a.init[2], shape)
        elif kind == "uniform":
            x = rng.uniform(a.init[1], a.init[2], shape)
        elif kind == "npy":
            try:
                x = np.load(a.init[1], allow_pickle=False)  # an object array would unpickle: code from data
            except (OSError, ValueError, EOFError) as e:
                raise NnbenchError(f"{a.where}: args.{a.name}.init: {a.init[1]}: cannot read as .npy: {e}") from None
            if x.shape != shape:
                raise NnbenchError(f"{a.where}: args.{a.name}.init: {a.init[1]} holds shape {x.shape}; the problem "
                                   f"{problem_text(problem)} needs {shape}")
        elif kind == "ones":
            x = np.ones(shape)
        else:
            x = np.zeros(shape)
        out[a.name] = np.ascontiguousarray(x, dtype=a.dtype)
    return out


def npy_header(path: str) -> tuple[tuple[int, ...], np.dtype]:
    """An .npy file's shape and dtype, from its header alone (no array is read, nothing unpickled).
    Raises NnbenchError saying what is wrong with the file."""
    try:
        safeio.readable(path, ".npy file")
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            # numpy's public header readers (its private one is gone from numpy 2.4): formats 1.0 and 2.0, which
            # np.save writes for every numeric array (3.0 is only for non-Latin-1 field names)
            read = {(1, 0): np.lib.format.read_array_header_1_0,
                    (2, 0): np.lib.format.read_array_header_2_0}.get(version)
            if read is None:
                raise ValueError(f"format {version[0]}.{version[1]}; allowed: 1.0 or 2.0, as np.save writes numbers")
            shape, _, dtype = read(f, max_header_size=10000)
    except (OSError, ValueError, EOFError, SyntaxError, TypeError) as e:
        raise NnbenchError(f"not a readable .npy file ({' '.join(str(e).split())[:200]})") from None
    if dtype.hasobject or dtype.kind not in "biuf":
        raise NnbenchError(f"holds {dtype} elements; allowed: numbers (an object array would be unpickled, "
                           "which runs code)")
    return shape, dtype


def scalar_values(spec: KernelSpec, env: dict) -> dict[str, float]:
    return {a.name: np.dtype(a.dtype).type(expr.evaluate(a.value, env)) for a in spec.args if a.kind == "scalar"}


def call_reference(problem: KernelProblem, inputs: dict[str, np.ndarray], params: dict | None = None
                   ) -> dict[str, np.ndarray]:
    """The reference's outputs in float64, checked against the declared output shapes. It takes every
    argument in order (arrays as float64 copies, scalars as Python numbers) and returns the outputs in
    order (one array, a tuple, or a dict by name). Raises NnbenchError naming the `reference` key."""
    spec = problem.spec
    fn = reference_function(spec)
    env = dict(problem.as_dict(), **(params or {}))
    scalars = scalar_values(spec, env)
    args = [inputs[a.name].astype(np.float64) if a.kind == "array" else scalars[a.name].item() for a in spec.args]
    got = usercode.call(fn, args, f"{spec.where_reference}: reference: {spec.reference}")
    outs = spec.outputs
    if isinstance(got, dict):
        missing = [a.name for a in outs if a.name not in got]
        if missing:
            raise NnbenchError(f"{spec.where_reference}: reference: {spec.reference} returned no {missing[0]!r}; "
                               f"it must return {', '.join(a.name for a in outs)}")
        got = [got[a.name] for a in outs]
    elif not isinstance(got, (tuple, list)):
        got = [got]
    if len(got) != len(outs):
        raise NnbenchError(f"{spec.where_reference}: reference: {spec.reference} returned {len(got)} arrays; the "
                           f"config checks {len(outs)} outputs ({', '.join(a.name for a in outs)})")
    result = {}
    for a, g in zip(outs, got):
        g = np.asarray(g)
        want = problem.shape_of(a)
        if g.shape != want and g.size != int(np.prod(want)):
            raise NnbenchError(f"{spec.where_reference}: reference: {spec.reference} returned shape {g.shape} for "
                               f"{a.name!r}; {problem_text(problem)} declares {want}")
        if not np.issubdtype(g.dtype, np.number):
            raise NnbenchError(f"{spec.where_reference}: reference: {spec.reference} returned {g.dtype} for "
                               f"{a.name!r}; expected numbers")
        result[a.name] = g.astype(np.float64).reshape(want)
    return result


def reference_function(spec: KernelSpec):
    """The reference's function: a callable the Python API registered in this process, else the file the
    config names, loaded now (this runs the user's code: only a case calls it, never a config's load)."""
    module, _, name = spec.reference.rpartition(":")
    if module == CALLABLE_MODULE:
        if name not in CALLABLES:
            raise NnbenchError(f"{spec.where_reference}: reference: a Python callable given to nnbench.benchmark() "
                               "lives in that process only; a sweep (a worker process) needs module:function")
        return CALLABLES[name]
    return usercode.function(spec.reference_file, name, f"{spec.where_reference}: reference: {spec.reference}")


CALLABLE_MODULE = "_callable"  # a reference given to the Python API as a callable (nnbench/api.py)
CALLABLES: dict[str, object] = {}


# -- the session ----------------------------------------------------------------------------------
class KernelSession(Session):
    """A problem's inputs and float64 reference on the host, its arrays on the device."""

    def __init__(self, backend, settings: measure.TimingSettings, rtol: float, seed: int, env: dict) -> None:
        self.backend, self.settings, self.env = backend, settings, env or {}
        self.device = getattr(backend, "device", None)
        self._problem: KernelProblem | None = None
        self.inputs: dict[str, np.ndarray] = {}
        self.refs: dict[str, np.ndarray] | None = None
        self.bufs: dict[str, object] = {}
        self.pristine: dict[str, object] = {}
        self.ref_error = ""
        self.cpu_checked: KernelProblem | None = None
        self.fresh: tuple | None = None  # (problem, inputs, refs) of the second draw, made once per problem
        self.loaded: tuple | None = None  # (id of the Compiled, kernel name, the loaded kernel) of the case running

    def base_record(self, problem: KernelProblem) -> dict:
        return dict(workload=SUITE, shape=problem.label, problem=problem_text(problem), flops=problem.flops,
                    bytes=problem.bytes, rtol=problem.rtol(), cold=self.settings.cold, seed=problem.spec.seed,
                    unit="launch", **self.env)

    def prepare(self, problem: KernelProblem, following=None) -> None:
        if problem == self._problem and problem.spec == getattr(self._problem, "spec", None):
            return
        self.bufs, self.pristine, self.refs, self.ref_error = {}, {}, None, ""
        self._problem = problem
        try:
            self.inputs = make_inputs(problem)
        except NnbenchError as e:  # an .npy file changed since the config was loaded
            self.inputs, self.ref_error = {}, str(e)
            return
        if self.backend.runs_kernels:
            for name, host in self.inputs.items():
                self.bufs[name] = self.backend.upload(host)
                self.pristine[name] = self.backend.upload(host)

    def run_case(self, case: Case, problem: KernelProblem, compiled=None) -> dict:
        v = case.variant
        self.prepare(problem)
        rec = dict(self.base_record(problem), variant=v.name, step=v.step, params=case.param_label,
                   precision=v.precision)
        if problem.spec.reference and self.refs is None and not self.ref_error:
            # The user's code runs here, in a case (under the sweep's watchdog), never when a config loads.
            try:
                self.refs = call_reference(problem, self.inputs)
            except NnbenchError as e:
                self.ref_error = str(e)
        if self.ref_error:
            return dict(rec, status="ERROR", error=self.ref_error)
        if not self.backend.runs_kernels:
            return self._reference_against_itself(rec, problem)
        if isinstance(compiled, CompileError):
            return dict(rec, status="ERROR", error=str(compiled))
        try:
            self.loaded = None  # a module of its own for each case
            launch, info = self._launcher(case, problem, compiled)
            rec.update(info)
            if self.refs is None:  # the baseline variant's outputs are the reference: run it first
                self.refs = self._baseline_outputs(problem)
            t0 = time.perf_counter()
            err, verify_ms = self._verify(launch)
            stats = measure.measure(self.backend, launch, self.settings, self._last_batch(problem, rec["rtol"]))
            failures = self._audit(case, problem, compiled, stats, rec["rtol"])
        except KernelFault as e:
            return dict(rec, status="ERROR", error=f"kernel fault: {e}", fault=True)
        except CompileError as e:  # the baseline variant, compiled here to make the reference
            return dict(rec, status="ERROR", error=f"the reference (baseline) did not compile: {e}")
        t = stats.median_ms * 1e-3
        rec.update(stats.as_record(), gflops=problem.flops / t / 1e9, gbs=problem.bytes / t / 1e9, rel_err=err,
                   status="PASS" if err <= rec["rtol"] else "FAIL")
        rec["gpu_ms"] += verify_ms
        rec["wall_ms"] = 1e3 * (time.perf_counter() - t0)
        peak = self.device.peak_flops(v.precision) if self.device is not None else None
        if peak and problem.flops:
            rec["pct_peak"] = 100 * problem.flops / t / peak
        if problem.spec.baseline == v.name and not problem.spec.reference:
            rec["error"] = "the reference: its own outputs were checked against themselves"
        failures.append((audit.ROOFLINE, audit.device_roofline(self.device, v.precision, problem.flops,
                                                                problem.bytes, t)))
        return audit.judge(rec, failures)

    # -- the defenses against a kernel that games the timer (nnbench/audit.py) ------------------------
    def _last_batch(self, problem: KernelProblem, rtol: float) -> audit.LastBatch | None:
        """The outputs poisoned before the last timed batch and checked after it; one launch where an
        output is also read (each launch changes it, so only one launch's result is known)."""
        if not audit.enabled(audit.TIMED_OUTPUT):
            return None
        spec = problem.spec

        def check() -> str | None:
            err = self._output_error(self.refs, self.bufs, self.inputs)
            return None if err <= rtol else (f"the outputs of the last timed batch are wrong (rel_err {err:.3g} > "
                                             f"{rtol:g}) where the check launch's were checked")
        return audit.LastBatch(lambda: self._poison(spec.outputs, self.bufs, self.inputs), check,
                               single=any(not a.written_only for a in spec.outputs))

    def _audit(self, case: Case, problem: KernelProblem, compiled, stats, rtol: float) -> list[tuple[str, str]]:
        """The checks after timing, each (defense, why it failed) or (defense, None)."""
        spec = problem.spec
        out = audit.timed_findings(stats)
        if audit.enabled(audit.INPUTS_UNCHANGED):
            ins = [a.name for a in spec.args if a.kind == "array" and not a.output]
            after = {k: self.backend.download(self.bufs[k], self.inputs[k]) for k in ins}
            edited = audit.changed({k: self.inputs[k] for k in ins}, after)
            out.append((audit.INPUTS_UNCHANGED, edited and f"the kernel changed its input(s) {', '.join(edited)} "
                        "while it was timed (an array it may write is an output: `output: true`)"))
        if audit.enabled(audit.ZERO_OUTPUT):
            blind = [a.name for a in spec.outputs if audit.zeros_pass(self.refs[a.name], rtol)]
            out.append((audit.ZERO_OUTPUT, blind and f"an all-zero {', '.join(blind)} would pass this check (the "
                        f"reference is all zero, or rtol {rtol:g} >= 1): give inputs whose reference is not zero"))
        if audit.enabled(audit.FRESH_BUFFERS):
            err, other = self._fresh_error(case, problem, compiled)
            out.append((audit.FRESH_BUFFERS, err > rtol and (
                f"on a second input set{other} at other addresses the outputs are wrong (rel_err {err:.3g} > "
                f"{rtol:g}): the kernel depends on what it has seen")))
        return out

    def _fresh_error(self, case: Case, problem: KernelProblem, compiled) -> tuple[float, str]:
        """One launch on buffers the kernel has not seen, against their reference: other values where the
        inputs are drawn and a reference callable exists (a baseline variant's outputs hold for the first
        draw only), allocated while the first set is alive, so at other addresses."""
        spec = problem.spec
        if self.fresh is None or self.fresh[0] != problem:
            inputs = make_inputs(problem, draw=1) if spec.reference else dict(self.inputs)
            refs = call_reference(problem, inputs) if spec.reference else self.refs
            self.fresh = (problem, inputs, refs)
        _, inputs, refs = self.fresh
        bufs = {k: self.backend.upload(x) for k, x in inputs.items()}
        self._poison(spec.outputs, bufs, inputs)
        launch, _ = self._launcher(case, problem, compiled, bufs)
        self.backend.timed(launch, 1)
        return self._output_error(refs, bufs, inputs), " (other values)" if spec.reference else ""

    def _poison(self, args, bufs: dict, inputs: dict) -> None:
        """`args`' written-only float arrays become NaN, the others their initial contents (host to device)."""
        for a in args:
            if a.written_only and a.dtype in ("float32", "float16", "float64"):
                self.backend.write(bufs[a.name], np.full_like(inputs[a.name], np.nan))
            else:
                self.backend.write(bufs[a.name], inputs[a.name])

    def _output_error(self, refs: dict, bufs: dict, inputs: dict) -> float:
        err = max(measure.rel_err(self.backend.download(bufs[a.name], inputs[a.name]).astype(np.float64),
                                  refs[a.name]) for a in self._problem.spec.outputs)
        return err if np.isfinite(err) else float("inf")

    def _launcher(self, case: Case, problem: KernelProblem, compiled, bufs: dict | None = None):
        v, params = case.variant, case.param_dict
        bufs = self.bufs if bufs is None else bufs
        # One module per case: its globals (a cache, a launch count) are the same for every launch of the case,
        # the one on fresh buffers included, as they would be in the user's program.
        if self.loaded is None or self.loaded[:2] != (id(compiled), v.kernel):
            self.loaded = (id(compiled), v.kernel, self.backend.load(compiled, v.kernel))
        kernel = self.loaded[2]
        env = dict(problem.as_dict(), **params)
        scalars = scalar_values(problem.spec, env)
        args, sig = [], ""
        for a in problem.spec.args:
            if a.kind == "array":
                args.append(self.backend.ptr(bufs[a.name]))
                sig += "P"
            else:
                args.append(scalars[a.name])
                sig += SCALARS[a.dtype][0]
        grid, block = v.launch_grid(params, problem.as_dict()), v.launch_block(params)
        smem = v.dynamic_smem_bytes(params)
        occ = self.backend.occupancy(kernel, v.threads(params), smem)
        info = dict(threads=v.threads(params), registers=kernel.info.registers,
                    smem_bytes=kernel.info.smem_bytes + smem, local_bytes=kernel.info.local_bytes,
                    occupancy=occ.occupancy, occupancy_limiter=occ.limiter)
        return self.backend.bind(kernel, grid, block, tuple(args), sig, smem=smem), info

    def _reset_outputs(self, spec: KernelSpec) -> None:
        """Written-only outputs become NaN (an element the kernel never writes fails the check);
        read-write ones get their initial contents back; so do inputs a faulty kernel may have written."""
        for a in spec.args:
            if a.kind != "array":
                continue
            n = self.inputs[a.name].nbytes
            if a.written_only and a.dtype in ("float32", "float16", "float64"):
                self.backend.write(self.bufs[a.name], np.full_like(self.inputs[a.name], np.nan))
            else:
                self.backend.copy(self.bufs[a.name], self.pristine[a.name], n)

    def _outputs(self, spec: KernelSpec) -> dict[str, np.ndarray]:
        return {a.name: self.backend.download(self.bufs[a.name], self.inputs[a.name]) for a in spec.outputs}

    def _verify(self, launch) -> tuple[float, float]:
        spec = self._problem.spec
        self._reset_outputs(spec)
        ms = self.backend.timed(launch, 1)
        err = self._output_error(self.refs, self.bufs, self.inputs)
        self._reset_outputs(spec)
        return err, ms

    def _baseline_outputs(self, problem: KernelProblem) -> dict[str, np.ndarray]:
        """The baseline variant's outputs at its defaults, in float64: the reference of the other variants."""
        from nnbench.runtime.compile import CompileRequest, compile_cubin
        base = problem.spec.baseline_case
        v = base.variant
        comp = compile_cubin(CompileRequest.make(Path(v.source), base.param_dict, v.target(self.backend.arch),
                                                 v.includes))
        launch, _ = self._launcher(base, problem, comp)
        self._reset_outputs(problem.spec)
        self.backend.timed(launch, 1)
        out = {k: x.astype(np.float64) for k, x in self._outputs(problem.spec).items()}
        self._reset_outputs(problem.spec)
        return out

    def _reference_against_itself(self, rec: dict, problem: KernelProblem) -> dict:
        """The CPU path: no kernel runs. The reference is timed, its float32 (the outputs' dtype) result
        verified against its float64 one, and the row says so."""
        if self.refs is None:
            return dict(rec, status="SKIP", error="CPU backend: the reference is a CUDA kernel (the baseline), "
                                                 "which needs a GPU")
        if self.cpu_checked == problem:  # every case would time the same reference again
            return dict(rec, status="SKIP", error="CPU backend: no kernel runs; the reference was verified "
                                                 "against itself once for this problem (the first case's row)")
        self.cpu_checked = problem
        spec = problem.spec
        # A float64 reference of a large problem takes seconds on a CPU: three samples are enough to show it.
        settings = replace(self.settings, min_samples=min(3, self.settings.min_samples))
        stats = measure.measure(self.backend, lambda: call_reference(problem, self.inputs), settings)
        err = max(measure.rel_err(self.refs[a.name].astype(a.dtype).astype(np.float64), self.refs[a.name])
                  for a in spec.outputs)
        t = stats.median_ms * 1e-3
        # The row is the reference's, not the case's: its own variant and status, no step (so no table stars it
        # as the fastest kernel) and no parameters (so no gate matches it with a kernel's row of that case).
        return dict(rec, **stats.as_record(), variant=REFERENCE_VARIANT, step="", params="", precision="FP64 host",
                    rel_err=err, gflops=problem.flops / t / 1e9, gbs=problem.bytes / t / 1e9,
                    status=REFERENCE if err <= rec["rtol"] else "FAIL",
                    error=f"CPU backend: no kernel ran ({rec['variant']} {rec['params']} asked); the reference was "
                          "timed and verified against itself")


class KernelWorkload(Workload):
    name = SUITE
    default_rtol = None  # each problem's own limit, from the config's rtol expression

    def variants(self, backend: str | None = None) -> list[Variant]:
        return []  # a config declares its own

    def runs_on(self, v: Variant, backend: str) -> bool:
        return backend in ("cuda", "cpu")  # the CPU path verifies the reference against itself

    def footprint(self, problem: KernelProblem) -> tuple[float, float]:
        return footprint(problem)

    def parse_problems(self, path: Path, node) -> list:
        raise fail(path, node, "shapes: a kernel config names its sizes under `problems:`")

    def compile(self, arch: str, cases: list[Case], jobs: int | None = None) -> dict[Case, object]:
        from nnbench.runtime.compile import CompileRequest, compile_many
        todo = [c for c in cases if c.variant.source]
        reqs = [CompileRequest.make(Path(c.variant.source), c.param_dict, c.variant.target(arch),
                                    getattr(c.variant, "includes", ())) for c in todo]
        return dict(zip(todo, compile_many(reqs, jobs=jobs, return_errors=True)))

    def session(self, backend, settings, rtol, seed, env, options=None) -> KernelSession:
        return KernelSession(backend, settings, rtol, seed, env)


WORKLOAD = KernelWorkload()


# -- PTX: the entries a source defines, and their parameters ------------------------------------------
_ENTRY = re.compile(r"\.entry\s+([\w$]+)\s*\(([^)]*)\)", re.S)
_PARAM = re.compile(r"\.param\s+(?:\.align\s+\d+\s+)?\.(\w+)(?:\s+\.ptr)?")
_MANGLED = re.compile(r"_Z(\d+)")


def plain_name(entry: str) -> str:
    """A C++ entry's source name (`_Z10vector_addPKfS0_Pfi` -> vector_add); an extern "C" one as is."""
    m = _MANGLED.match(entry)
    return entry[m.end():m.end() + int(m.group(1))] if m else entry


def ptx_entries(source: Path, includes: tuple[str, ...], params: dict[str, int], arch: str) -> dict[str, list[str]]:
    """{entry name: [PTX parameter type, ...]} for every kernel nvcc emits for the source, cached by
    the source's content (with its headers), the include folders, the parameters and nvcc."""
    from nnbench.runtime.compile import CompileRequest, _sources_closure, nvcc_path, nvcc_version
    req = CompileRequest.make(source, params, arch, includes)
    h = hashlib.sha256()
    for f in _sources_closure(source, includes):
        h.update(f.read_bytes())
    h.update(repr((req.params, arch, includes, nvcc_version())).encode())
    cache = paths.cache_dir()
    hit = cache / f"ptx-{h.hexdigest()[:32]}.json"
    try:
        return json.loads(hit.read_text())
    except (OSError, ValueError):
        pass
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "k.ptx"
        cmd = [nvcc_path(), "-ptx", "-std=c++17", f"-arch={arch.rstrip('a')}", f"-I{paths.KERNELS}",
               *(f"-I{d}" for d in includes), *(f"-D{k}={v}" for k, v in req.params), "-o", str(out), str(source)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            first = next((ln for ln in proc.stderr.splitlines() if "error" in ln), proc.stderr.strip()[:300])
            raise CompileError(f"nvcc failed on {req.label()}: {first.strip()}")
        text = out.read_text()
    entries = {m.group(1): _PARAM.findall(m.group(2)) for m in _ENTRY.finditer(text)}
    try:
        cache.mkdir(parents=True, exist_ok=True)
        tmp_hit = hit.with_suffix(f".{id(entries)}.tmp")
        tmp_hit.write_text(json.dumps(entries))
        tmp_hit.replace(hit)
    except OSError:
        pass  # an unwritable cache costs one more nvcc next time, nothing else
    return entries


# -- loading a config ---------------------------------------------------------------------------------
def is_kernel_config(root) -> bool:
    return isinstance(root, yaml.MappingNode) and any(
        k.value in ("workload", *OLD_KEYS) and getattr(v, "value", None) == SUITE for k, v in root.value)


def load(path: Path, root=None):
    """A kernel config as a SweepSpec of workload `kernel` (see the module's docstring)."""
    from nnbench.yamlnodes import compose, renamed
    path = Path(path).resolve()
    top = mapping(path, renamed(path, root if root is not None else compose(path), "top level"), "top level",
                  TOP_KEYS, required=("workload", "source", "args", "variants", "problems"))
    here = path.parent
    name = string(path, top["name"][1], "name") if "name" in top else path.stem
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise fail(path, top["name"][1], f"name: {name!r} may use only letters, digits, '_', '-' and '.'")
    includes = tuple(str(_existing(path, n, "include", here, folder=True))
                     for n in _list(path, top["include"][1], "include")) if "include" in top else ()
    source = _existing(path, top["source"][1], "source", here)
    problems_axes = _problems(path, top["problems"][1])
    axis_names = list(problems_axes[0])
    seed = integer(path, top["seed"][1], "seed", minimum=0, maximum=SEED_MAX) if "seed" in top else 0
    args = _args(path, top["args"][1], here, axis_names)
    if not any(a.output for a in args):
        raise fail(path, top["args"][1], "args: no argument is marked `output: true`; say which arrays to check")
    flops = _formula(path, top, "flops", axis_names, "0")
    nbytes = _formula(path, top, "bytes", axis_names, str(_default_bytes(args)))
    rtol = _formula(path, top, "rtol", axis_names, DEFAULT_RTOL)
    precision = string(path, top["precision"][1], "precision", list(PRECISIONS)) if "precision" in top else FFMA
    arch = string(path, top["arch"][1], "arch") if "arch" in top else CHECK_ARCH
    if not re.fullmatch(r"sm_\d{2,3}a?", arch):
        raise fail(path, top["arch"][1], f"arch: {arch!r} is not sm_XY (for example sm_90)")

    variants, cases, counts = [], [], []
    vmap = mapping(path, top["variants"][1], "variants")
    if not vmap:
        raise fail(path, top["variants"][1], "variants: give at least one, e.g. `main: {kernel: NAME}`")
    for step, (vname, (_, body)) in enumerate(vmap.items(), 1):
        v, body_axes = _variant(path, str(vname), step, body, source, includes, precision, arch, args, here,
                                axis_names)
        got, count = variant_cases(path, v, body_axes)
        variants.append((v, body))
        cases += got
        counts.append(count)
    if not cases:
        raise fail(path, top["variants"][1], "variants: every point was excluded; nothing to run")

    reference = baseline = reference_file = ""
    ref_where = where(path, top["reference"][1]) if "reference" in top else ""
    if "reference" in top:
        reference = scalar(path, top["reference"][1], "reference")
        module, _, fname = reference.rpartition(":")
        if module == CALLABLE_MODULE:  # registered by the Python API in this process; a file cannot name one
            if fname not in CALLABLES:
                raise fail(path, top["reference"][1], f"reference: {reference!r}: {CALLABLE_MODULE} names a callable "
                                                      f"given to nnbench.benchmark(); give {usercode.FORMS}")
        else:
            try:  # the file is read and parsed, never run: loading a config runs no user code
                reference_file = str(usercode.resolve(reference, here)[0])
            except NnbenchError as e:
                raise fail(path, top["reference"][1], f"reference: {e}") from None
    base_case = None
    if "baseline" in top:
        names = [v.name for v, _ in variants]
        baseline = string(path, top["baseline"][1], "baseline", names)
        bv = next(v for v, _ in variants if v.name == baseline)
        base_case = Case.defaults(bv)
        if base_case in cases:
            cases.remove(base_case)
        cases.insert(0, base_case)
    if not reference and not baseline:
        raise fail(path, top["workload"][1], "reference: missing; give `reference: module:function` (float64 NumPy) "
                                          "or `baseline: VARIANT` (another variant whose outputs are the reference)")
    spec = KernelSpec(name, str(path), args, flops, nbytes, rtol, seed, reference, str(here), baseline,
                      ref_where or where(path, top["baseline"][1]), base_case, reference_file)
    problems = [KernelProblem(tuple(p.items()), spec) for p in problems_axes]
    distinct = _distinct_cases(cases, args)
    for p in problems:
        _check_problem(path, top, p, distinct, {v.name: body for v, body in variants})
    _check_npy(args, problems)
    desc = scalar(path, top["description"][1], "description") if "description" in top else ""
    return Declaration(name, path, top, cases, problems, base_case, float(expr.evaluate(rtol, problems[0].as_dict())),
                       seed, counts, desc)


@dataclass(frozen=True)
class Declaration:
    """What a kernel config declares, for nnbench/sweeps/config.py to make a sweep of (its `timing:`
    and search settings are a sweep's, read there from `top`)."""

    name: str
    path: Path
    top: dict
    cases: list
    problems: list
    baseline: Case | None
    rtol: float
    seed: int
    counts: list
    description: str


def _scalar_range(dtype: str) -> tuple[float, float]:
    info = np.iinfo(dtype) if np.dtype(dtype).kind in "iu" else np.finfo(dtype)
    return float(info.min), float(info.max)


def _number_text(x: float) -> str:
    return f"{int(x):,}" if abs(x) < 2**64 else f"{x:g}"


def _check_npy(args: tuple[Arg, ...], problems: list[KernelProblem]) -> None:
    """Each .npy input's header against every problem's shape for it (the reference's output shapes are
    checked where the reference runs: in a case)."""
    for a in args:
        if a.kind != "array" or a.init[0] != "npy":
            continue
        try:
            have, _ = npy_header(a.init[1])
        except NnbenchError as e:
            raise ConfigError(f"{a.where}: args.{a.name}.init: {a.init[1]}: {e}") from None
        for p in problems:
            if have != p.shape_of(a):
                raise ConfigError(f"{a.where}: args.{a.name}.init: {a.init[1]} holds shape {have}; the problem "
                                  f"{problem_text(p)} needs {p.shape_of(a)}")


def _list(path: Path, node, what: str) -> list:
    return [node] if isinstance(node, yaml.ScalarNode) else sequence(path, node, what)


def _existing(path: Path, node, what: str, here: Path, folder: bool = False) -> Path:
    text = scalar(path, node, what)
    try:
        p = (here / text).resolve()
        found = p.is_dir() if folder else p.is_file()
    except (OSError, ValueError, RuntimeError):  # a NUL byte, a name too long, a symlink loop (RuntimeError <3.13)
        found = False
    if not found:
        raise fail(path, node, f"{what}: {text!r} is not {'a folder' if folder else 'a file'} (paths are relative "
                               f"to the config's folder, {here})")
    return p


def _problems(path: Path, node) -> list[dict[str, int]]:
    """`problems:` a list of {AXIS: value or list}; lists within one item are crossed."""
    items = [node] if isinstance(node, yaml.MappingNode) else sequence(path, node, "problems")
    if not items:
        raise fail(path, node, "problems: the list is empty")
    out: list[dict[str, int]] = []
    names = None
    for item in items:
        axes = mapping(path, item, "problems")
        if names is not None and list(axes) != names:
            raise fail(path, item, f"problems: every item names the same axes, in order: {', '.join(names)}")
        names = list(axes)
        for k in names:
            if not re.fullmatch(r"[A-Za-z_]\w*", k) or k in expr.FUNCTIONS:
                raise fail(path, axes[k][0], f"problems: {k!r} is not a usable axis name (letters, digits, '_')")
        lists = [(k, _list(path, vn, f"problems.{k}")) for k, (_, vn) in axes.items()]
        for k, nodes in lists:
            if not nodes:
                raise fail(path, axes[k][1], f"problems.{k}: the list is empty; give at least one value")
        count = len(out) + math.prod(len(nodes) for _, nodes in lists)  # counted before any is made
        if count > MAX_PROBLEMS:
            sizes = " × ".join(f"{len(nodes):,} {k}" for k, nodes in lists)
            raise fail(path, item, f"problems: {sizes} make {count:,} problems; at most {MAX_PROBLEMS:,} are allowed")
        values = [[integer(path, n, f"problems.{k}", minimum=1) for n in nodes] for k, nodes in lists]
        out += [dict(zip(names, combo)) for combo in itertools.product(*values)]
    return list({tuple(p.items()): p for p in out}.values())


def _formula(path: Path, top: dict, key: str, names: list[str], default: str) -> str:
    return _axis_expr(path, top[key][1], key, names) if key in top else default


def _default_bytes(args: tuple[Arg, ...]) -> str:
    """Every array read or written once: the fewest bytes one launch can move."""
    terms = [" * ".join([str(np.dtype(a.dtype).itemsize), *(f"({s})" for s in a.shape)]) for a in args
             if a.kind == "array"]
    return " + ".join(terms) or "0"


def _args(path: Path, node, here: Path, axis_names: list[str]) -> tuple[Arg, ...]:
    out = []
    for item in sequence(path, node, "args"):
        keys = mapping(path, item, "args", ARG_KEYS, required=("name",))
        name = string(path, keys["name"][1], "args.name")
        what = f"args.{name}"
        if ("array" in keys) == ("scalar" in keys):
            raise fail(path, item, f"{what}: give exactly one of `array: DTYPE` or `scalar: DTYPE`")
        if "array" in keys:
            dtype = string(path, keys["array"][1], f"{what}.array", ARRAYS)
            if "shape" not in keys:
                raise fail(path, item, f"{what}: an array needs `shape:`, a list of expressions over "
                                       f"{', '.join(axis_names)}")
            shape = tuple(_axis_expr(path, n, f"{what}.shape", axis_names)
                          for n in _list(path, keys["shape"][1], f"{what}.shape"))
            output = _bool(path, keys, "output", what)
            init, written_only = ("zeros",), False
            if "init" in keys:
                init = _init(path, keys["init"][1], what, here)
            elif output:
                written_only = True
            else:
                init = ("normal", 0.0, 1.0)
            seed = integer(path, keys["seed"][1], f"{what}.seed", minimum=0, maximum=SEED_MAX) if "seed" in keys else 0
            if "seed" in keys and init[0] not in ("normal", "uniform"):  # a seed nothing draws from: refused, not
                raise fail(path, keys["seed"][0], f"{what}.seed: only a random init (normal, uniform) draws "  # ignored
                                                  f"from a seed; this argument's init is "
                                                  f"{'none (an output)' if written_only else init[0]}")
            for k in ("value",):
                if k in keys:
                    raise fail(path, keys[k][0], f"{what}: `value` is for scalars; an array takes init")
            out.append(Arg(name, "array", dtype, shape, "", init, seed, output, written_only, where(path, item)))
        else:
            dtype = string(path, keys["scalar"][1], f"{what}.scalar", list(SCALARS))
            for k in ("shape", "init", "output", "seed"):
                if k in keys:
                    raise fail(path, keys[k][0], f"{what}: {k!r} is for arrays; a scalar takes `value:`")
            if "value" not in keys:
                raise fail(path, item, f"{what}: a scalar needs `value:` (a number or an expression over the "
                                       "parameters and problem axes)")
            text = scalar(path, keys["value"][1], f"{what}.value")
            try:
                expr.parse(text)
            except NnbenchError as e:
                raise fail(path, keys["value"][1], f"{what}.value: {e}") from None
            out.append(Arg(name, "scalar", dtype, (), text, where=where(path, item)))
    names = [a.name for a in out]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise fail(path, node, f"args: {dup!r} is named twice")
    return tuple(out)


def _bool(path: Path, keys: dict, key: str, what: str) -> bool:
    from nnbench.yamlnodes import boolean
    return boolean(path, keys[key][1], f"{what}.{key}") if key in keys else False


def _axis_expr(path: Path, node, what: str, names: list[str]) -> str:
    """An expression over the problem axes (a shape, a formula), checked for its syntax and names."""
    text = scalar(path, node, what)
    try:
        expr.parse(text)
        unknown = expr.names(text) - set(names)
    except NnbenchError as e:
        raise fail(path, node, f"{what}: {e}") from None
    if unknown:
        raise fail(path, node, f"{what}: unknown name {sorted(unknown)[0]!r}; allowed: the problem axes "
                               f"{', '.join(names)}")
    return text


def _init(path: Path, node, what: str, here: Path) -> tuple:
    """normal | uniform | zeros | ones | {normal: [mean, std]} | {uniform: [lo, hi]} | {npy: FILE}."""
    if isinstance(node, yaml.ScalarNode):
        kind = string(path, node, f"{what}.init", ["normal", "uniform", "zeros", "ones"])
        return {"normal": ("normal", 0.0, 1.0), "uniform": ("uniform", -1.0, 1.0)}.get(kind, (kind,))
    keys = mapping(path, node, f"{what}.init", INITS)
    if len(keys) != 1:
        raise fail(path, node, f"{what}.init: give one of {', '.join(INITS)}")
    kind, (_, body) = next(iter(keys.items()))
    if kind == "npy":
        return ("npy", str(_existing(path, body, f"{what}.init.npy", here)))
    if kind in ("zeros", "ones"):
        return (kind,)
    pair = sequence(path, body, f"{what}.init.{kind}")
    if len(pair) != 2:
        raise fail(path, body, f"{what}.init.{kind}: expected [{'mean, std' if kind == 'normal' else 'lo, hi'}]")
    a, b = (number(path, n, f"{what}.init.{kind}") for n in pair)
    if kind == "uniform" and not a < b:
        raise fail(path, body, f"{what}.init.uniform: needs lo < hi; got [{a:g}, {b:g}]")
    if kind == "normal" and not b > 0:
        raise fail(path, body, f"{what}.init.normal: the std must be > 0; got {b:g}")
    return (kind, a, b)


def _variant(path: Path, vname: str, step: int, body, source: Path, includes: tuple[str, ...], precision: str,
             arch: str, args: tuple[Arg, ...], here: Path, problem_axes: list[str]):
    """One variant: a Variant whose parameters are its axes (the first value the default), the
    mapping node of its axes and restrictions for base.variant_cases, after the kernel name and
    signature were checked against the PTX."""
    what = f"variants.{vname}"
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", vname):
        raise fail(path, body, f"{what}: a variant's name may use only letters, digits, '_', '-' and '.'")
    keys = mapping(path, body, what, VARIANT_KEYS, required=("kernel",))
    src = _existing(path, keys["source"][1], f"{what}.source", here) if "source" in keys else source
    params = []
    if "axes" in keys:
        for aname, (anode, vals) in mapping(path, keys["axes"][1], f"{what}.axes").items():
            if not re.fullmatch(r"[A-Z_][A-Z0-9_]*", str(aname)):
                raise fail(path, anode, f"{what}.axes: {aname!r} is not a macro name (upper case letters, digits, "
                                        "'_'); each axis is passed to nvcc as -DNAME=VALUE")
            if aname in problem_axes:  # the grid sees both: which N it meant would be a guess
                raise fail(path, anode, f"{what}.axes: {aname!r} is also a problem axis; name the parameter "
                                        f"otherwise (problem axes: {', '.join(problem_axes)})")
            values = [v for v, _ in space.axis_values(path, vals, f"{what}.axes.{aname}")]
            params.append(Param(str(aname), values[0], tuple(dict.fromkeys(values)), "a kernel config axis"))
    env_names = {p.name for p in params}
    geometry = {}
    for key, default in (("grid", "(1, 1, 1)"), ("block", "(1, 1, 1)"), ("shared", "0")):
        if key not in keys:
            if key == "shared":
                geometry[key] = default
                continue
            raise fail(path, body, f"{what}: missing key {key!r}: an expression over the axes and problem axes")
        text = scalar(path, keys[key][1], f"{what}.{key}")
        allowed = env_names | (set(problem_axes) if key == "grid" else set())
        try:
            expr.parse(text)
            unknown = expr.names(text) - allowed
        except NnbenchError as e:
            raise fail(path, keys[key][1], f"{what}.{key}: {e}") from None
        if unknown:
            over = "the axes and problem axes" if key == "grid" else "the axes (the problem cannot change it)"
            raise fail(path, keys[key][1], f"{what}.{key}: unknown name {sorted(unknown)[0]!r}; {key} is written "
                                           f"over {over}: {', '.join(sorted(allowed)) or '(none)'}")
        geometry[key] = text
    kname = string(path, keys["kernel"][1], f"{what}.kernel")
    defaults = {p.name: p.default for p in params}
    try:
        entries = ptx_entries(src, includes, defaults, arch)
    except CompileError as e:
        raise fail(path, keys["kernel"][1], f"{what}: {e}") from None
    entry = _entry(path, keys["kernel"][1], what, kname, entries, src)
    _check_signature(path, keys["kernel"][1], what, kname, entries[entry], args)
    summary = scalar(path, keys["summary"][1], f"{what}.summary") if "summary" in keys else f"{kname} from {src.name}"
    v = KernelVariant(SUITE, vname, step, summary, str(src), tuple(params), block=geometry["block"],
                      grid=geometry["grid"], kernel=entry, precision=precision, dynamic_smem=geometry["shared"],
                      includes=includes)
    pairs = [(k, n) for k, n in body.value if k.value in ("axes", "restrict")]
    return v, yaml.MappingNode("tag:yaml.org,2002:map", pairs, body.start_mark, body.end_mark)


def _entry(path: Path, node, what: str, kname: str, entries: dict, src: Path) -> str:
    if kname in entries:
        return kname
    by_plain = [e for e in entries if plain_name(e) == kname]
    if len(by_plain) == 1:
        return by_plain[0]
    names = sorted({plain_name(e) for e in entries})
    if by_plain:
        raise fail(path, node, f"{what}.kernel: {kname!r} is overloaded in {src.name} ({', '.join(by_plain)}); "
                               "name one of these entries, or declare the kernel extern \"C\"")
    raise fail(path, node, f"{what}.kernel: {src.name} has no kernel {kname!r}; nvcc reports: "
                           f"{', '.join(names) or '(no __global__ functions)'}")


def _check_signature(path: Path, node, what: str, kname: str, ptx_params: list[str], args: tuple[Arg, ...]) -> None:
    if len(ptx_params) != len(args):
        raise fail(path, node, f"{what}.kernel: {kname} takes {len(ptx_params)} arguments; args declares "
                               f"{len(args)} ({', '.join(a.name for a in args)})")
    for i, (a, t) in enumerate(zip(args, ptx_params)):
        allowed = POINTER if a.kind == "array" else SCALARS[a.dtype][1]
        if t not in allowed:
            what_it_is = "a pointer" if t in POINTER and a.kind != "array" else f"a .{t}"
            declared = f"an array ({a.dtype} *)" if a.kind == "array" else f"scalar {a.dtype}"
            raise fail(path, node, f"{what}.kernel: argument {i} ({a.name}) is declared {declared} but {kname}'s "
                                   f"PTX takes {what_it_is} there; allowed for it: "
                                   f"{', '.join(sorted('.' + x for x in allowed))}")


def footprint(p: KernelProblem) -> tuple[float, float]:
    """(host bytes, device bytes) of one problem, estimated from its arrays' shapes before any is made. Host: each
    array, its float64 copy for the reference and the reference's float64 result; device: each array and the fresh
    copy a timed launch writes into."""
    arrays = [(math.prod(p.shape_of(a)), np.dtype(a.dtype).itemsize) for a in p.spec.args if a.kind == "array"]
    return float(sum(n * (size + 2 * 8) for n, size in arrays)), float(sum(2 * n * size for n, size in arrays))


def _check_problem(path: Path, top: dict, p: KernelProblem, distinct: list, nodes: dict) -> None:
    """Every expression evaluates for the problem, and every case's launch fits CUDA's limits."""
    env = p.as_dict()
    for key, text in (("flops", p.spec.flops), ("bytes", p.spec.bytes), ("rtol", p.spec.rtol)):
        try:
            val = expr.evaluate(text, env)
        except NnbenchError as e:
            raise fail(path, top[key][1] if key in top else top["problems"][1], f"{key}: {e}") from None
        if key == "rtol" and not val > 0:
            raise fail(path, top[key][1], f"rtol: {text} is {val:g} at {problem_text(p)}; it must be > 0")
        if key in ("flops", "bytes") and (isinstance(val, tuple) or val < 0):  # a negative rate is no measurement
            raise fail(path, top[key][1] if key in top else top["problems"][1],
                       f"{key}: {text} is {val} at {problem_text(p)}; it must be a number >= 0")
    for a in p.spec.args:
        if a.kind == "array":
            try:
                dims = p.shape_of(a)
            except NnbenchError as e:
                raise ConfigError(f"{a.where}: args.{a.name}.shape: {e}") from None
            if any(d < 1 for d in dims):
                raise ConfigError(f"{a.where}: args.{a.name}.shape: {dims} at {problem_text(p)}; every size must "
                                  "be >= 1")
    try:  # every problem, not only the first to run: a later N = 10^11 is refused here, not in an allocation
        memory.require_host(footprint(p)[0], f"problems: {problem_text(p)}", "smaller problems")
    except NnbenchError as e:
        raise fail(path, top["problems"][1], str(e)) from None
    _check_cases(path, p, env, distinct, nodes)


CASE_CHECKS = ("block", "grid", "threads", "shared")  # after each scalar argument, in this order


def _distinct_cases(cases: list[Case], args: tuple[Arg, ...]) -> list[tuple[int, object, list[tuple[int, Case]]]]:
    """(order, check, cases) for each variant and check (a scalar argument, then CASE_CHECKS): the cases that differ
    in the axes the check reads, each the first of the cases (index, case) with its values. A check reads a few
    axes only: a 10^6-point space whose grid reads one axis of 1,000 values has its grid checked 1,000 times per
    problem, not 10^6 times (checking each case took minutes)."""
    checks = [a for a in args if a.kind == "scalar"] + list(CASE_CHECKS)
    groups: dict[tuple, list[tuple[int, Case]]] = {}  # by variant and the order of its axes' names
    first_of = operator.itemgetter(0)
    for i, c in enumerate(cases):
        groups.setdefault((c.variant.name, tuple(map(first_of, c.params))), []).append((i, c))
    out = []
    for members in groups.values():
        v = members[0][1].variant
        texts = {"block": v.block, "threads": v.block, "grid": v.grid, "shared": v.dynamic_smem}
        by_places: dict[tuple[int, ...], list[tuple[int, Case]]] = {}
        for order, check in enumerate(checks):
            read = expr.names(texts[check] if isinstance(check, str) else check.value)
            # the places of the axes it reads in the cases' (name, value) pairs (every axis: a derived name reads any)
            places = tuple(j for j, (name, _) in enumerate(members[0][1].params) if name in read or v.derived)
            if places not in by_places:
                project = operator.itemgetter(*places) if places else (lambda params: ())
                seen: dict = {}
                for i, c in members:
                    seen.setdefault(project(c.params), (i, c))
                by_places[places] = list(seen.values())
            out.append((order, check, by_places[places]))
    return out


def _check_cases(path: Path, p: KernelProblem, env: dict, distinct: list, nodes: dict) -> None:
    """Every check of _distinct_cases at problem `p`; the error is the first case's (in the cases' order) and,
    within it, the first check's, as if each case were checked in turn."""
    first: tuple[int, int, NnbenchError] | None = None
    for order, check, members in distinct:
        for i, c in members:
            if first is not None and i > first[0]:
                break
            try:
                _check_case(path, p, env, c, nodes[c.variant.name], check)
            except NnbenchError as e:
                if first is None or (i, order) < first[:2]:
                    first = (i, order, e)
                break
    if first is not None:
        raise first[2]


def _check_case(path: Path, p: KernelProblem, env: dict, c: Case, node, check) -> None:
    """One check of case `c` at problem `p`: a scalar argument (an Arg) fits its type, or one of CASE_CHECKS."""
    v, params = c.variant, c.param_dict
    point = f"{c.param_label + ' ' if c.param_label else ''}at {problem_text(p)}"
    if not isinstance(check, str):
        a = check
        try:
            value = expr.evaluate(a.value, dict(env, **params))
        except NnbenchError as e:
            raise ConfigError(f"{a.where}: args.{a.name}.value: {e}") from None
        lo, hi = _scalar_range(a.dtype)
        if np.dtype(a.dtype).kind in "iu" and isinstance(value, float) and not value.is_integer():
            raise ConfigError(f"{a.where}: args.{a.name}.value: {a.value} is {value:g} {point}; a {a.dtype} "
                              "holds whole numbers only")
        if isinstance(value, tuple) or not lo <= value <= hi:
            raise ConfigError(f"{a.where}: args.{a.name}.value: {a.value} is {value} {point}; a {a.dtype} "
                              f"holds {_number_text(lo)}..{_number_text(hi)}")
        return
    body = mapping(path, node, f"variants.{v.name}")
    if check in ("block", "grid", "threads"):
        key, text, limit = ("grid", v.grid, MAX_GRID) if check == "grid" else ("block", v.block, MAX_BLOCK)
        try:
            dims = v.launch_grid(params, env) if key == "grid" else v.launch_block(params)
        except (NnbenchError, TypeError, ValueError) as e:
            raise fail(path, body[key][1], f"variants.{v.name}.{key}: {e}") from None
        bad = [i for i in range(3) if not 1 <= dims[i] <= limit[i]]
        if bad:
            raise fail(path, body[key][1], f"variants.{v.name}.{key}: {text} is {dims} {point}; CUDA allows "
                                           f"1..{limit[bad[0]]:,} in {'xyz'[bad[0]]}; restrict the axes")
        threads = dims[0] * dims[1] * dims[2]
        if check == "threads" and threads > MAX_THREADS:
            raise fail(path, body["block"][1], f"variants.{v.name}.block: {v.block} is {threads} threads {point}; "
                                               f"CUDA allows at most {MAX_THREADS} per block; restrict the axes")
        return
    try:
        smem = v.dynamic_smem_bytes(params)
    except NnbenchError as e:
        raise fail(path, body["shared"][1], f"variants.{v.name}.shared: {e}") from None
    from nnbench.runtime.device import for_arch
    most = max(for_arch(a).smem_per_block_optin for a in ("sm_80", "sm_90"))
    if not 0 <= smem <= most:
        raise fail(path, body["shared"][1], f"variants.{v.name}.shared: {v.dynamic_smem} is {smem:,} bytes "
                                            f"{point}; a block may have 0..{most:,} (H100)")
