"""`nnbench profile`: one kernel variant of any workload seen from every side.

  resources   registers, static shared memory, spills (ptxas's report kept beside the cubin) and
              the theoretical occupancy with its limiter (on the GPU's limits, or an arch's without one);
  mix         the hot loop's instruction mix from the SASS (nnbench.profiling.sass);
  achieved    (on a GPU) the case run by its workload's own session (verified, then timed by
              `measure`) on one problem: its FLOP/s and bytes/s against the measured ceilings, and
              its roofline position, from the problem's counters;
  ncu         (--ncu) Nsight Compute's metrics for one launch, and its duration beside nnbench's.

The problem is the workload's: a GEMM shape, a net (and batch), a convolution layer or LeNet-5.
For a trainer, --ncu profiles one launch of its main kernel (or --kernel) during a short run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from nnbench import measure
from nnbench.errors import NnbenchError
from nnbench.profiling import ncu, sass
from nnbench.profiling.roofline import Position, Roof, position, roof_for
from nnbench.registry import Variant
from nnbench.runtime.compile import CompileRequest, compile_cubin
from nnbench.runtime.device import for_arch, occupancy
from nnbench.workloads import WORKLOADS, workload
from nnbench.workloads.base import Case, TimeSplit

ALIASES = {"mlp": "train"}  # train's name before it was a workload


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
    workload: str
    variant: Variant
    params: dict
    arch: str
    device: str
    kernels: list[KernelProfile] = field(default_factory=list)
    problem: object = None  # the workload's problem (a GEMM shape, a net, a layer)
    record: dict | None = None  # the verified, timed case
    flops: float | None = None  # per timed unit (a launch, an iteration, a step)
    bytes: float | None = None
    seconds: float | None = None
    roof: Roof | None = None
    where: Position | None = None
    ncu: dict | None = None
    ncu_ms: float | None = None
    ncu_csv: str | None = None  # ncu's raw output
    split: TimeSplit | None = None  # --split KIND: the case's unit part by part


def _has_kernel(v: Variant) -> None:
    if v.source is None:
        raise NnbenchError(f"--variant {v.name}: runs on the host (NumPy); there is no kernel to profile")


def variant_params(work_name: str, name: str, overrides: dict[str, int]) -> tuple[Variant, dict]:
    work_name = ALIASES.get(work_name, work_name)
    if work_name not in WORKLOADS:
        raise NnbenchError(f"profile {work_name}: choose a workload from {', '.join(WORKLOADS)}")
    known = {v.name: v for v in workload(work_name).variants()}
    if name not in known:
        raise NnbenchError(f"--variant {name}: unknown {work_name} variant; choose from {', '.join(known)}")
    v = known[name]
    _has_kernel(v)
    unknown = [k for k in overrides if not v.param(k)]
    if unknown:
        raise NnbenchError(f"--{unknown[0].lower()} {overrides[unknown[0]]}: {name} does not take {unknown[0]}; "
                           f"it takes {', '.join(p.name for p in v.params) or 'no parameters'}")
    params = dict(v.defaults(), **overrides)
    problems = v.problems(params)
    if problems:
        raise NnbenchError(problems[0])
    return v, params


def check_split(work_name: str, kind: str, name: str, overrides: dict[str, int], problem, case: Case | None = None,
                backend=None) -> None:
    """Refuse a split (`--split KIND`) that the case's workload does not offer, or does not offer for this case
    and problem (the workload's own line), or that has no GPU to run on; before anything runs."""
    work_name = ALIASES.get(work_name, work_name)
    work = workload(work_name)
    if kind not in work.splits:
        offers = [n for n in WORKLOADS if kind in workload(n).splits]
        raise NnbenchError(f"--split {kind}: the {work_name} workload has no {kind}; "
                           + (f"profile {' or '.join(offers)} for them" if offers else "no workload has them"))
    if case is None:
        v, params = variant_params(work_name, name, overrides)
        case = Case(v, tuple(params.items()))
    why = work.split_refusal(kind, case, problem)
    if why:
        raise NnbenchError(why)
    if backend is not None and not backend.runs_kernels:
        raise NnbenchError(f"--split {kind}: times kernels on a GPU; needs the cuda backend (this run is on the "
                           f"{backend.name} backend)")


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
            k.mix_note = sass.NOT_FOUND
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


def main_kernel(v: Variant) -> str:
    """The kernel --ncu profiles for a variant unless --kernel says otherwise."""
    return {"fused": "fused_train", "batched": "backward_delta", "batched-cublas": "backward_delta",
            "launches": "forward"}.get(v.runner, v.kernel)


QUICK = measure.TimingSettings(budget_s=0.01, min_samples=3, max_noise=1.0, energy=False)


def profile(backend, work_name: str, name: str, overrides: dict[str, int], problem, arch: str | None,
            with_ncu: bool = False, child_argv: list[str] | None = None,
            settings: measure.TimingSettings = measure.TimingSettings(), kernel: str | None = None,
            case: Case | None = None, split: str | None = None) -> Profile:
    """`case`: a case of a sweep config (`--config`), for a variant the registry does not hold (a user's
    kernel) or a point of a config's axes; else the registry's variant `name` with `overrides`. `split`:
    one of the workload's splits (Workload.splits) to measure after the case, on a GPU."""
    work_name = ALIASES.get(work_name, work_name)
    work = workload(work_name)
    v, params = (case.variant, case.param_dict) if case is not None else variant_params(work_name, name, overrides)
    _has_kernel(v)  # a config's case too (a trainer's host version in configs/train_table.yaml)
    if split is not None:
        check_split(work_name, split, name, overrides, problem, Case(v, tuple(params.items())), backend)
    device = getattr(backend, "device", None)
    from nnbench.runtime.device import NO_GPU_ARCH
    arch = backend.arch if device is not None else (arch or NO_GPU_ARCH)
    comp = compiled_for(work, Case(v, tuple(params.items())), arch)
    dev = device or for_arch(arch)
    prof = Profile(work_name, v, params, arch, dev.name, resources(v, params, comp, dev), problem=problem)
    if kernel is not None and kernel not in comp.ptxas:
        raise NnbenchError(f"--kernel {kernel}: {v.source} has {', '.join(sorted(comp.ptxas))}")
    add_mix(prof.kernels, comp)
    work.validate(problem)
    case = Case(v, tuple(params.items()))
    if not work.applies(case, problem):
        raise NnbenchError(f"--variant {name}: does not run on {problem.label}")
    if device is None:
        return prof
    problems = v.device_problems(params, device)
    if problems:
        raise NnbenchError(f"{v.name}: {problems[0]}")
    session = _session(backend, work, problem, settings)
    prof.record = session.run_case(case, problem, comp)
    prof.flops, prof.bytes = prof.record.get("flops") or problem.flops, problem.bytes
    prof.seconds = (prof.record.get("median_ms") or 0.0) * 1e-3
    if split is not None:  # its own check and timing, whether or not the case passed
        prof.split = session.time_split(split, case, problem)
    passed = prof.record.get("status") == "PASS" and prof.seconds
    from nnbench.profiling.ceilings import measure_ceilings
    timed_split = prof.split is not None and prof.split.status == "PASS"
    ceilings = measure_ceilings(backend) if passed or (timed_split and prof.split.ceilings) else {}
    if timed_split:
        prof.split.ceiling_values = {k: ceilings[k] for k in prof.split.ceilings}
    if not passed:
        return prof
    prof.roof = roof_for(prof.record.get("precision") or v.precision, device, ceilings)
    # A whole model's step (LeNet-5) counts no FLOPs or bytes of its own: it has no point on the roofline.
    if prof.roof is not None and prof.flops and prof.bytes:
        prof.where = position(prof.flops, prof.bytes, prof.seconds, prof.roof)
    if with_ncu:
        if kernel is None and work_name == "gemm":  # step 9 may launch its transposed kernel for this shape
            from nnbench.workloads.gemm.session import launched_kernel
            kernel = launched_kernel(v, params, problem, device)
        prof.ncu, prof.ncu_csv = ncu.run(kernel or main_kernel(v), child_argv or [], hopper=tuple(device.cc)[0] == 9)
        prof.ncu_ms = ncu.duration_ms(prof.ncu)
    return prof


def compiled_for(work, case: Case, arch: str):
    """The case's module as its workload compiles it (includes, architecture-specific targets), or as a
    plain nvcc build where the workload compiles inside its session (the trainers)."""
    comp = work.compile(arch, [case]).get(case)
    if comp is None:
        comp = compile_cubin(CompileRequest.make(_kernel_path(case.variant), case.param_dict,
                                                 case.variant.target(arch)))
    if isinstance(comp, Exception):
        raise NnbenchError(str(comp))
    return comp


def from_config(path, name: str, overrides: dict[str, int], problem_index: int):
    """(workload, case, problem) of a sweep config: the first case of variant `name` whose parameters
    include `overrides`, on the config's problem number `problem_index` (0: the first)."""
    from nnbench.sweeps import config
    for spec in config.load_config(path):
        cases = [c for c in spec.cases if c.variant.name == name
                 and all(c.param_dict.get(k) == x for k, x in overrides.items())]
        if cases:
            if not 0 <= problem_index < len(spec.shapes):
                raise NnbenchError(f"--problem {problem_index}: {path} has problems 0 to {len(spec.shapes) - 1}")
            return spec.workload_name, cases[0], spec.shapes[problem_index]
    names = sorted({c.variant.name for spec in config.load_config(path) for c in spec.cases})
    raise NnbenchError(f"--variant {name}: {path} has no case of it with {overrides or 'its defaults'}; "
                       f"its variants: {', '.join(names)}")


def _session(backend, work, problem, settings):
    session = work.session(backend, settings, work.default_rtol, 0, {})
    session.warm_up()
    session.prepare(problem)
    return session


def run_case(backend, work, case: Case, problem, comp, settings) -> dict:
    """The case through its workload's own session: verified first, then timed."""
    return _session(backend, work, problem, settings).run_case(case, problem, comp)


def _kernel_path(v: Variant):
    from nnbench import paths
    return paths.KERNELS / v.source


def launch_only(backend, work_name: str, name: str, overrides: dict[str, int], problem,
                case: Case | None = None) -> None:
    """What ncu profiles: a GEMM kernel launched ncu.WARMUP_LAUNCHES + 1 times on fresh inputs and
    nothing else (no blocking kernel, no verification, no ceilings); or, for any other workload, its
    case run once with the shortest timing, of whose launches ncu takes one of the chosen kernel."""
    work_name = ALIASES.get(work_name, work_name)
    v, params = (case.variant, case.param_dict) if case is not None else variant_params(work_name, name, overrides)
    comp = compiled_for(workload(work_name), Case(v, tuple(params.items())), backend.arch)
    if work_name != "gemm":
        run_case(backend, workload(work_name), Case(v, tuple(params.items())), problem, comp, QUICK)
        backend.synchronize()
        return
    from nnbench.workloads.gemm import session as gemm_session
    from nnbench.workloads.gemm.session import random_nonzero
    kernel = backend.load(comp, v.kernel)
    rng = np.random.default_rng(0)
    shape = problem
    a = backend.upload(random_nonzero(rng, (shape.M, shape.K)).astype(np.float32))
    b = backend.upload(random_nonzero(rng, (shape.K, shape.N)).astype(np.float32))
    c = backend.upload(np.zeros((shape.M, shape.N), np.float32))
    launch_for, _ = gemm_session.gemm_launch(backend, kernel, v, params, shape, *map(backend.ptr, (a, b, c)))
    run = launch_for(1.0, 0.0)
    for _ in range(ncu.WARMUP_LAUNCHES + 1):
        run()
    backend.synchronize()


def fidelity_pct(prof: Profile) -> float | None:
    """nnbench's CUDA-event median against ncu's gpu__time_duration, in % (positive: ours longer).
    Only for a GEMM, where both time the same single kernel."""
    if prof.workload != "gemm" or prof.ncu_ms is None or not prof.record or not prof.record.get("median_ms"):
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


def _with_environment(prof: Profile, environment: dict) -> dict:
    """The timed case's record as a sweep writes it: a profile's session runs without the environment
    columns (run_case), so they come from the command's, with the workload, wherever the record has none."""
    fill = {"workload": prof.workload, **environment}
    return {**prof.record, **{k: v for k, v in fill.items() if prof.record.get(k) is None}}


def as_json(prof: Profile, environment: dict) -> dict:
    """A profile as its `--json` line (kind "profile"; docs/JSON.md): what the tables print, in SI units
    (FLOP/s, bytes/s, seconds), with the timed case's record where one ran (its raw samples included)."""
    from dataclasses import asdict

    from nnbench import rawresults
    return {"kind": "profile", "workload": prof.workload, "variant": prof.variant.name, "params": dict(prof.params),
            "arch": prof.arch, "device": prof.device, "problem": None if prof.problem is None else str(prof.problem),
            "kernels": [asdict(k) for k in prof.kernels], "flops": prof.flops, "bytes": prof.bytes,
            "seconds": prof.seconds, "fidelity_pct": fidelity_pct(prof),
            "roof": None if prof.roof is None else {**asdict(prof.roof), "ridge": prof.roof.ridge},
            "position": None if prof.where is None else asdict(prof.where),
            "ncu": prof.ncu, "ncu_ms": prof.ncu_ms, "split": None if prof.split is None else split_json(prof.split),
            "record": None if prof.record is None else rawresults.to_json(_with_environment(prof, environment)),
            "environment": environment}


def split_json(split: TimeSplit) -> dict:
    """A split (--split KIND) in its profile's JSON line: the parts' times in seconds, each with its share
    of the whole unit; the ceilings under their own names (their unit in the name)."""
    return {"kind": split.kind, "unit": split.unit, "how": split.how, "status": split.status,
            "rel_err": split.rel_err, "rtol": split.rtol, "whole_s": split.whole_s,
            "parts_s": split.parts_s if split.rows else None,
            "parts": [dict(r, share=split.share(r)) for r in split.rows],
            "ceilings": dict(split.ceiling_values), "notes": list(split.notes)}
