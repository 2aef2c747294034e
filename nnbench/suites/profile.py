"""`nnbench profile`: one kernel variant seen from every side.

  resources   registers, static shared memory, spills (ptxas's report kept beside the cubin) and
              the theoretical occupancy with its limiter (on the GPU's limits, or an arch's without one);
  mix         the hot loop's instruction mix from the SASS (nnbench.profiling.sass);
  achieved    (GEMM, on a GPU) the verified case's CUDA-event median, its FLOP/s and bytes/s against
              the measured ceilings, and its roofline position;
  ncu         (--ncu) Nsight Compute's metrics for one launch, and its duration beside nnbench's.

A GEMM variant is profiled on one shape. An MLP version is profiled on a net (--net, and --batch
for the mini-batch versions): its achieved figures are those of a short verified training run
(per iteration or per step), its bytes the fewest an implementation that streams the weights
must move, and --ncu profiles one launch of its main kernel (or --kernel) during such a run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from nnbench import measure, registry
from nnbench.errors import NnbenchError
from nnbench.profiling import ncu, sass
from nnbench.profiling.roofline import Position, Roof, position
from nnbench.registry import Variant
from nnbench.runtime.compile import CompileRequest, compile_cubin
from nnbench.runtime.device import for_arch, occupancy
from nnbench.suites import gemm as gemm_suite

SUITES = ("gemm", "mlp")


@dataclass
class KernelProfile:
    kernel: str
    threads: int
    registers: int
    smem_bytes: int
    spill_bytes: int  # spill stores + loads
    stack_bytes: int
    blocks_per_sm: int
    occupancy: float
    limiter: str
    loop: tuple[int, int] | None = None
    mix: dict[str, int] | None = None
    mix_note: str = ""


@dataclass
class Profile:
    suite: str
    variant: Variant
    params: dict
    arch: str
    device: str
    kernels: list[KernelProfile] = field(default_factory=list)
    shape: gemm_suite.Shape | None = None
    record: dict | None = None  # the verified, timed GEMM case, or the MLP version's training record
    layers: tuple[int, ...] | None = None  # MLP: the net
    batch: int = 1
    flops: float | None = None  # per launch (GEMM) / iteration or step (MLP)
    bytes: float | None = None
    seconds: float | None = None
    roof: Roof | None = None
    where: Position | None = None
    ncu: dict | None = None
    ncu_ms: float | None = None


def variant_params(suite: str, name: str, overrides: dict[str, int]) -> tuple[Variant, dict]:
    if suite not in SUITES:
        raise NnbenchError(f"profile {suite}: choose a suite from {', '.join(SUITES)}")
    v = registry.get(suite, name)
    if v.source is None:
        raise NnbenchError(f"--variant {name}: runs on the host (NumPy); there is no kernel to profile")
    unknown = [k for k in overrides if not v.param(k)]
    if unknown:
        raise NnbenchError(f"--{unknown[0].lower()} {overrides[unknown[0]]}: {name} does not take {unknown[0]}; "
                           f"it takes {', '.join(p.name for p in v.params) or 'no parameters'}")
    params = dict(v.defaults(), **overrides)
    problems = v.problems(params)
    if problems:
        raise NnbenchError(problems[0])
    return v, params


def resources(v: Variant, params: dict, comp, device) -> list[KernelProfile]:
    """One row per kernel of the compiled module (ptxas's report; occupancy on `device`'s limits)."""
    out = []
    threads = v.threads(params)
    for name, rep in sorted(comp.ptxas.items(), key=lambda kv: kv[0] != v.kernel):
        occ = occupancy(device, threads, rep.registers, rep.smem_bytes)
        out.append(KernelProfile(name, threads, rep.registers, rep.smem_bytes,
                                 rep.spill_store_bytes + rep.spill_load_bytes, rep.stack_bytes, occ.blocks_per_sm,
                                 occ.occupancy, occ.limiter))
    return out


def add_mix(kernels: list[KernelProfile], comp) -> None:
    if sass.cuobjdump() is None:
        for k in kernels:
            k.mix_note = "cuobjdump not on PATH"
        return
    funcs = sass.parse(sass.dump(comp.cubin))
    for k in kernels:
        f = funcs.get(k.kernel)
        if f is None:
            k.mix_note = "not in the SASS"
            continue
        k.loop = f.hot_loop()
        k.mix = sass.mix(f.body(k.loop))
        k.mix_note = "hot loop" if k.loop else "whole kernel (no loop)"


MLP_ITERATIONS = 1040  # per-sample iterations of an MLP profile (20 epochs of the 52 letters)
MLP_STEPS = 20  # mini-batch steps


def main_kernel(v: Variant) -> str:
    """The kernel --ncu profiles for a variant unless --kernel says otherwise."""
    if v.suite == "gemm":
        return v.kernel
    return "fused_train" if "fused" in v.tags else "backward_delta" if "batched" in v.tags else "forward"


def mlp_bytes(layers: tuple[int, ...], batch: int) -> float:
    """The fewest DRAM bytes of one iteration (batch 1) or step: per sample, the weights are read by
    the forward and the backward pass and read and written with their velocities by the update
    (6 passes over 4-byte weights); a batch adds each GEMM's operands and result once."""
    weights = sum(n_out * (n_in + 1) for n_in, n_out in zip(layers, layers[1:]))
    if batch == 1:
        return 24.0 * weights
    from nnbench.suites import batched
    return sum(4.0 * (m * k + k * n + m * n) for _, m, n, k in batched.gemm_shapes(layers, batch)) + 16.0 * weights


def profile(backend, suite: str, name: str, overrides: dict[str, int], shape: gemm_suite.Shape, arch: str | None,
            with_ncu: bool = False, child_argv: list[str] | None = None,
            settings: measure.TimingSettings = measure.TimingSettings(), layers: tuple[int, ...] | None = None,
            batch: int = 1, kernel: str | None = None) -> Profile:
    v, params = variant_params(suite, name, overrides)
    device = getattr(backend, "device", None)
    arch = backend.arch if device is not None else (arch or "sm_90")
    comp = compile_cubin(CompileRequest.make(_kernel_path(v), params, v.target(arch)))
    dev = device or for_arch(arch)
    prof = Profile(suite, v, params, arch, dev.name, resources(v, params, comp, dev))
    if kernel is not None and kernel not in comp.ptxas:
        raise NnbenchError(f"--kernel {kernel}: {v.source} has {', '.join(sorted(comp.ptxas))}")
    add_mix(prof.kernels, comp)
    if suite == "gemm":
        gemm_suite.validate_shape(shape)
        prof.shape = shape
    else:
        prof.layers, prof.batch = layers, batch
    if device is None:
        return prof
    if suite == "gemm":
        gemm_suite.fit_device(v, params, device)
        session = gemm_suite.Session(backend, settings)
        prof.record = session.run_case(gemm_suite.Case(v, tuple(params.items())), shape, comp)
        prof.flops, prof.bytes = shape.flops, shape.bytes
        prof.seconds = prof.record.get("median_ms", 0.0) * 1e-3
    else:
        prof.record = _mlp_record(backend, v, params, layers, batch)
        per = "us_per_step" if batch > 1 else "us_per_iteration"
        prof.flops = prof.record.get("flops_per_step" if batch > 1 else "flops_per_iteration")
        prof.bytes = mlp_bytes(layers, batch)
        prof.seconds = (prof.record.get(per) or 0.0) * 1e-6
    if prof.record.get("status") != "PASS" or not prof.seconds:
        return prof
    from nnbench.suites.ceilings import measure_ceilings
    c = measure_ceilings(backend)
    prof.roof = Roof(c["fma_tflops"] * 1e12, c["copy_gbs"] * 1e9, "measured")
    prof.where = position(prof.flops, prof.bytes, prof.seconds, prof.roof)
    if with_ncu:
        prof.ncu = ncu.run(kernel or main_kernel(v), child_argv or [])
        prof.ncu_ms = ncu.duration_ms(prof.ncu)
    return prof


def _mlp_record(backend, v: Variant, params: dict, layers, batch: int, quick: bool = False) -> dict:
    """A short verified training run of one MLP version, through the suite's own `run`."""
    from nnbench.suites import batched, mlp
    hyper = mlp.Hyper(max_iterations=8 if quick else MLP_ITERATIONS, init="centered", init_scale=5.0, rate=0.02)
    if "batched" in v.tags:
        steps = 4 if quick else MLP_STEPS
        gen = batched.run(backend, [(v, params)], layers, hyper, batch, epochs=1, train_samples=batch * steps)
    else:
        if batch > 1:
            raise NnbenchError(f"--batch {batch}: {v.name} trains per sample; the mini-batch versions are "
                               + ", ".join(x.name for x in batched.versions("cuda")))
        gen = mlp.run(backend, [(v, params)], layers, hyper, baseline_iterations=8 if quick else 104)
    return next(iter(gen))


def _kernel_path(v: Variant):
    from nnbench import paths
    return paths.KERNELS / v.source


def launch_only(backend, suite: str, name: str, overrides: dict[str, int], shape: gemm_suite.Shape,
                layers: tuple[int, ...] | None = None, batch: int = 1) -> None:
    """What ncu profiles: a GEMM kernel launched ncu.WARMUP_LAUNCHES + 1 times on fresh inputs and
    nothing else (no blocking kernel, no verification, no ceilings); or a short MLP training run,
    of whose launches ncu takes one of the chosen kernel."""
    v, params = variant_params(suite, name, overrides)
    if suite != "gemm":
        _mlp_record(backend, v, params, layers, batch, quick=True)
        backend.synchronize()
        return
    comp = compile_cubin(CompileRequest.make(_kernel_path(v), params, v.target(backend.arch)))
    kernel = backend.load(comp, v.kernel)
    rng = np.random.default_rng(0)
    a = backend.upload(gemm_suite.random_nonzero(rng, (shape.M, shape.K)).astype(np.float32))
    b = backend.upload(gemm_suite.random_nonzero(rng, (shape.K, shape.N)).astype(np.float32))
    c = backend.upload(np.zeros((shape.M, shape.N), np.float32))
    launch_for, _ = gemm_suite.gemm_launch(backend, kernel, v, params, shape, *map(backend.ptr, (a, b, c)))
    run = launch_for(1.0, 0.0)
    for _ in range(ncu.WARMUP_LAUNCHES + 1):
        run()
    backend.synchronize()


def fidelity_pct(prof: Profile) -> float | None:
    """nnbench's CUDA-event median against ncu's gpu__time_duration, in % (positive: ours longer).
    Only for a GEMM, where both time the same single kernel."""
    if prof.suite != "gemm" or prof.ncu_ms is None or not prof.record or not prof.record.get("median_ms"):
        return None
    return 100.0 * (prof.record["median_ms"] - prof.ncu_ms) / prof.ncu_ms


def useful_note(m: dict[str, int] | None) -> str:
    if not m or not m["total"]:
        return ""
    math_ = sum(m[c] for c in sass.MATH)
    loads = m["LDS"] + m["LDG"]
    frac = sass.useful_fraction(m)
    return (f"{math_} math of {m['total']} instructions ({100 * frac:.0f}%, 1 in {1 / frac:.1f}); "
            f"{loads} loads for {math_} math" if frac > 0 else f"no math in {m['total']} instructions")
