"""The training workload (`nnbench train`, `workload: train` in sweeps): the seed's character-recognition
MLPs, per sample (nnbench/workloads/train/mlp.py, with the persistent kernels of fused.py) or in mini-batches
(nnbench/workloads/train/batched.py). Those modules are this workload's own; no other workload imports them.

Problem axes: the net (Nets 1-8 of configs/nets.yaml, or a layer list), the batch (1: per sample),
and how long to train (iterations per sample, or epochs of a noisy training set per mini-batch).
The registry's `runner` says which trainer runs a version. Every version is checked against the
float64 reference (its weight changes after a few samples or steps, outputs poisoned first) before
it trains; the record's median is per iteration (per sample) or per step (mini-batch), through `measure`
on the GPU (per sample: a block of iterations timed as one sample, mlp.time_block; mini-batch: the steady-state
step), the NumPy versions' epochs on the host clock. The defenses against a kernel that games the timer
(nnbench/audit.py) that apply to training: the last timed block audited, the check again on fresh buffers, and
no limit that weights which did not move would pass. PyTorch eager and CUDA-graph rows are the vendor rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from nnbench import audit, glyphs, measure, nets
from nnbench.errors import NnbenchError
from nnbench.runtime.device import HOST
from nnbench.workloads.base import Case, Session, Workload, problem_text
from nnbench.workloads.train import batched, mlp, phases
from nnbench.workloads.train.variants import VARIANTS
from nnbench.yamlnodes import fail, integer, mapping, scalar, sequence

MINI_BATCH = ("batched-numpy", "batched", "batched-cublas", "batched-wgmma")


@dataclass(frozen=True)
class TrainProblem:
    net: str  # "8", or "custom" for a layer list
    layers: tuple[int, ...]
    hyper: mlp.Hyper
    batch: int = 1
    epochs: int = batched.DEFAULT_EPOCHS  # mini-batch only
    train_samples: int = batched.DEFAULT_TRAIN_SAMPLES  # mini-batch only
    test_per_letter: int = 10
    blocks: int | None = None  # fused's grid (None: one block per SM)

    @property
    def label(self) -> str:
        name = f"Net {self.net}" if self.net != "custom" else "layers " + "-".join(map(str, self.layers))
        return name if self.batch == 1 else f"{name} B={self.batch}"

    def as_dict(self) -> dict:
        d = {"net": self.net, "layers": "-".join(map(str, self.layers)), "batch": self.batch}
        if self.batch == 1:
            d["iterations"] = self.hyper.max_iterations
        else:
            d.update(epochs=self.epochs, train_samples=self.train_samples)
        return d

    @property
    def flops(self) -> float:
        return (mlp.flops_per_iteration(self.layers) if self.batch == 1
                else batched.flops_per_step(self.layers, self.batch))

    @property
    def bytes(self) -> float:
        """The fewest DRAM bytes of one iteration (batch 1) or step: per sample, the weights are read by
        the forward and the backward pass and read and written with their velocities by the update
        (6 passes over 4-byte weights); a batch adds each GEMM's operands and result once."""
        weights = sum(n_out * (n_in + 1) for n_in, n_out in zip(self.layers, self.layers[1:]))
        if self.batch == 1:
            return 24.0 * weights
        return sum(4.0 * (m * k + k * n + m * n) for _, m, n, k in batched.gemm_shapes(self.layers, self.batch)) \
            + 16.0 * weights

    @property
    def unit(self) -> str:
        return "iteration" if self.batch == 1 else "step"


def problem_for(net: str | None, layers: tuple[int, ...] | None = None, batch: int = 1, **given) -> TrainProblem:
    """A problem from a net's name (its settings from configs/nets.yaml) or a layer list, with the
    user's settings on top (None: the net's, else the defaults)."""
    if layers is None:
        known = nets.load()
        if str(net) not in known:
            raise NnbenchError(f"--net {net}: unknown; choose from {', '.join(known)} (configs/nets.yaml)")
        layers, tuned, name = known[str(net)].layers, dict(known[str(net)].settings), str(net)
    else:
        tuned, name = {}, "custom"
    epochs, train_samples = given.pop("epochs", None), given.pop("train_samples", None)
    test_per_letter, blocks = given.pop("test_per_letter", 10), given.pop("blocks", None)
    if batch > 1 and given.get("rate") is None:
        given["rate"] = tuned.get("batch_rate", batched.DEFAULT_RATE)  # on the batch's mean error
    hyper = mlp.Hyper.from_settings(tuned, **given)
    hyper.check()
    return TrainProblem(name, tuple(layers), hyper, batch, epochs or batched.DEFAULT_EPOCHS,
                        train_samples or batched.DEFAULT_TRAIN_SAMPLES, test_per_letter, blocks)


def unify(rec: dict, problem: TrainProblem, unit_samples_s: list[float] | None = None,
          stats: measure.Stats | None = None) -> dict:
    """A trainer's row in the one record schema: workload `train`, the version as `variant`, the
    net as `shape`, the median (and spread) per iteration or step, the check as rel_err/rtol."""
    rec = dict(rec)
    rec["variant"] = rec.pop("version", rec.get("variant"))
    rec.update(workload="train", shape=problem.label, problem=problem_text(problem), unit=problem.unit,
               net=problem.net, batch=problem.batch, flops=problem.flops, rtol=rec.get("weights_rtol"))
    if rec.get("weights_rel_err") is not None:
        rec["rel_err"] = rec["weights_rel_err"]
    if stats is None and unit_samples_s:
        # The first timed run carries the warm-up (module load, first touches): left out when others exist.
        samples = unit_samples_s[1:] if len(unit_samples_s) > 1 else unit_samples_s
        stats = measure.summarize([1e3 * x for x in samples])
        # events around whole epochs (or fused launches) as the host issues them; a host version's clock
        stats.timing = measure.HOST if rec.get("precision") == HOST else measure.HOST_ISSUED
    if stats is not None and rec.get("status") in ("PASS", "FAIL"):
        rec.update({k: v for k, v in stats.as_record().items() if k not in ("gpu_ms", "converged")})
        rec["items_per_s"] = problem.batch / (stats.median_ms * 1e-3) if stats.median_ms > 0 else None
        rec["items_per_j"] = problem.batch / stats.energy_j if stats.energy_j else None  # training samples per J
        # The tables' time per iteration (or step) is the same steady-state median.
        rec["us_per_iteration" if problem.batch == 1 else "us_per_step"] = 1e3 * stats.median_ms
    rec.pop("epochs_run", None)
    return rec


def received_bits(test_outputs, test_samples: int) -> str:
    """What the trained net answers for the first held-out copy of each letter: 52 words of 7 bits
    (an output >= 0.5 is a 1), in glyphs.LETTERS order, for the command's letters view."""
    per_letter = test_samples // len(glyphs.LETTERS)
    return " ".join("".join("1" if v >= 0.5 else "0" for v in test_outputs[i * per_letter])
                    for i in range(len(glyphs.LETTERS)))


def unmoved_pass(trainer, limit: float | None) -> str | None:
    """Why weights that never move would pass the check at `limit`, or None: the check's output is the weight
    change, whose error is 1 for no change at all (measure.weight_change_error), so a limit of 1 or more
    (a sweep's timing.rtol) cannot tell a version that trains from one that does nothing (audit.zeros_pass)."""
    ref = getattr(trainer, "ref", None)
    if limit is None or ref is None:
        return None
    change = np.concatenate([(r - w0).ravel() for r, w0 in zip(ref, trainer.init)])
    return (f"weights that never move would pass this check (limit {limit:g}): give a limit below 1"
            if audit.zeros_pass(change, limit) else None)


@dataclass(frozen=True)
class TrainOptions:
    """How a command runs its training, beyond the problem: what a sweep leaves at the defaults."""

    progress: Callable[[str, int, float], None] | None = None  # (version, iterations or steps done, error)
    torch_iterations: int | None = None  # per-sample PyTorch rows' iterations (None: the problem's)
    world: object | None = None  # the MPI world of a data-parallel run (runtime.exchange.world())
    exchange_kind: str = "nccl"  # the GPU versions' gradient exchange under `world`
    bucket_mb: float | None = None  # allreduce buckets (None: chosen from the allreduce curve; the CPU's: 2 MB)
    letters: bool = False  # each version's record carries `received` (received_bits), for the letters view

def case_params(case: Case, how: str | None) -> str:
    """The record's params: the case's parameters (its identity, results.case_params), then after " · "
    what the trainer adds about how it ran (fused's grid, a data-parallel exchange, a graph)."""
    label, how = case.param_label, (how or "").strip()
    extra = how[len(label):].strip() if how.startswith(label) else how
    return f"{label} · {extra}" if label and extra else label or extra


class TrainWorkload(Workload):
    name = "train"
    table = VARIANTS
    unit = "iteration"
    default_rtol = None  # derived per run from the float32 arithmetic (mlp/batched.check_tolerance)
    vendor = "torch-graph"
    baseline = "sequential"
    vendor_rows = ("torch-eager", "torch-graph", "torch-ddp")
    splits = {"phases": "a persistent version's iteration, phase by phase: each phase's wait and work from the "
                        "kernel's own clocks, beside the device's handoff and grid-barrier latencies"}

    def runs_on(self, v, backend: str) -> bool:
        return v.backend in (backend, "cpu")  # the NumPy trainers are the speedups' baseline beside the GPU's

    def applies(self, case: Case, problem: TrainProblem) -> bool:
        return (case.variant.runner in MINI_BATCH) == (problem.batch > 1)

    def split_refusal(self, kind: str, case: Case, problem: TrainProblem) -> str | None:
        return phases.refusal(case.variant, [v.name for v in self.variants() if v.runner == phases.RUNNER])

    def parse_problems(self, path: Path, node) -> list[TrainProblem]:
        """{nets: [1, 8], batch: 1|[256, 4096], iterations: N, epochs: E, train_samples: S, blocks: G}
        or {layers: [120, 300, 7], ...}: every net at every batch."""
        what = "shapes"
        keys = mapping(path, node, what, ["nets", "layers", "batch", "iterations", "epochs", "train_samples",
                                          "blocks", "test_per_letter"])
        known = nets.load()
        if "layers" in keys and "nets" in keys:
            raise fail(path, node, f"{what}: give nets or layers, not both")
        if "layers" in keys:
            lists = [None]
            layers = tuple(integer(path, n, f"{what}.layers", minimum=1)
                           for n in sequence(path, keys["layers"][1], f"{what}.layers"))
        else:
            layers = None
            items = sequence(path, keys["nets"][1], f"{what}.nets") if "nets" in keys else []
            lists = [scalar(path, n, f"{what}.nets") for n in items] or list(known)
            for n, item in zip(lists, items):
                if n not in known:
                    raise fail(path, item, f"{what}.nets: no net {n!r}; nets: {', '.join(known)}")
        bnode = keys.get("batch", (None, None))[1]
        batches = [1] if bnode is None else (
            [integer(path, b, f"{what}.batch", minimum=1) for b in sequence(path, bnode, f"{what}.batch")]
            if isinstance(bnode, yaml.SequenceNode) else [integer(path, bnode, f"{what}.batch", minimum=1)])
        opt = {k: integer(path, keys[k][1], f"{what}.{k}", minimum=1) for k in
               ("epochs", "train_samples", "blocks", "test_per_letter") if k in keys}
        iterations = integer(path, keys["iterations"][1], f"{what}.iterations", minimum=1) \
            if "iterations" in keys else None
        out = []
        for net in lists:
            for b in batches:
                try:
                    p = problem_for(net, layers, b, max_iterations=iterations, **opt)
                except NnbenchError as e:
                    raise fail(path, node, f"{what}: {e}") from None
                if b > 1 and p.train_samples < b:
                    raise fail(path, node, f"{what}: train_samples {p.train_samples} is less than one batch of {b}")
                out.append(p)
        return out

    def footprint(self, problem: TrainProblem) -> tuple[float, float]:
        """As `nnbench train` estimates it: a mini-batch's activations and training set, the test glyphs."""
        mini = problem.batch > 1
        return mlp.footprint(problem.layers, problem.batch, problem.train_samples if mini else 0,
                             len(glyphs.LETTERS) * problem.test_per_letter)

    def validate(self, problem: TrainProblem) -> None:
        if problem.layers[0] not in (60, 120):
            raise NnbenchError(f"{problem.label} takes {problem.layers[0]} inputs; the glyph encodings are 60 or 120")
        if problem.layers[-1] != 7:
            raise NnbenchError(f"{problem.label} has {problem.layers[-1]} outputs; the targets need 7")

    def compile(self, arch: str, cases: list[Case], jobs: int | None = None) -> dict:
        """The trainers compile their versions themselves (a batched version is several tile sets);
        here every module goes into the cache at once, in parallel, so the runs only load."""
        from nnbench.runtime.compile import compile_sources
        sets: dict[str, dict[tuple, None]] = {}  # by build target (sm_90a for the wgmma version)
        for c in cases:
            if c.variant.source:
                tuned = c.variant.runner in ("batched", "batched-wgmma")
                for p in batched.tile_sets(c.variant) if tuned else [c.param_dict]:
                    sets.setdefault(c.variant.target(arch), {})[(c.variant.source, tuple(sorted(p.items())))] = None
        for target, these in sets.items():
            compile_sources(target, [(src, dict(p)) for src, p in these], jobs)
        return {}

    def session(self, backend, settings, rtol, seed, env, options: TrainOptions | None = None) -> TrainSession:
        return TrainSession(backend, settings, rtol, seed, env, options)


class TrainSession(Session):
    """A problem's trainer (mlp.PerSampleRun at batch 1, batched.BatchRun above), made once in
    `prepare` and shared by its cases, so the data, the float64 reference and the check's limit are
    made once per net; `run_case` trains one version, `run_vendor` one PyTorch row. Records are the
    one schema's (unify); the Outcome stays in this process (its samples become the record's)."""

    def __init__(self, backend, settings, rtol: float, seed: int, env: dict,
                 options: TrainOptions | None = None) -> None:
        self.backend, self.settings, self.rtol, self.env = backend, settings, rtol, env
        self.options = options or TrainOptions()
        self.problem: TrainProblem | None = None
        self.trainer: mlp.PerSampleRun | batched.BatchRun | None = None

    def base_record(self, problem: TrainProblem) -> dict:
        return unify(dict(self.env, status=""), problem)

    def prepare(self, problem: TrainProblem, following=None) -> None:
        if problem == self.problem:
            return
        o, h = self.options, problem.hyper
        self.problem = problem
        if problem.batch == 1:
            self.trainer = mlp.PerSampleRun(self.backend, problem.layers, h, problem.test_per_letter,
                                            torch_iterations=o.torch_iterations or h.max_iterations, env=self.env,
                                            blocks=problem.blocks, progress=o.progress)
        else:
            self.trainer = batched.BatchRun(self.backend, problem.layers, h, problem.batch, problem.epochs,
                                            problem.train_samples, problem.test_per_letter, progress=o.progress,
                                            env=self.env, world=o.world, exchange_kind=o.exchange_kind,
                                            bucket_mb=o.bucket_mb)

    def _finish(self, rec: dict, out, problem: TrainProblem) -> dict:
        rec = unify(rec, problem, getattr(out, "samples_s", None), getattr(out, "stats", None))
        outputs = getattr(out, "test_outputs", None)
        if self.options.letters and outputs is not None:
            rec["received"] = received_bits(outputs, rec["test_samples"])
        return rec

    def run_case(self, case: Case, problem: TrainProblem, compiled) -> dict:
        v = case.variant
        self.prepare(problem)
        try:
            rec, out = (self.trainer.version(v, case.param_dict) if problem.batch == 1
                        else self.trainer.version(v))
        except NnbenchError as e:
            rec, out = dict(version=v.name, status="SKIP", error=str(e)), None
        rec = self._finish(dict(rec, step=v.step, params=case_params(case, rec.get("params")), precision=v.precision),
                           out, problem)
        if self.rtol is not None and rec.get("rel_err") is not None and rec.get("status") in ("PASS", "FAIL"):
            rec["rtol"] = self.rtol  # a sweep's own timing.rtol replaces the derived limit
            rec["status"] = "PASS" if rec["rel_err"] <= self.rtol else "FAIL"
        failures = list(out.failures) if out is not None else []
        if rec.get("rel_err") is not None and audit.enabled(audit.ZERO_OUTPUT):
            failures.append((audit.ZERO_OUTPUT, unmoved_pass(self.trainer, rec.get("rtol"))))
        return audit.judge(rec, failures)

    def time_split(self, kind: str, case: Case, problem: TrainProblem):
        self.prepare(problem)
        return phases.phase_split(self.trainer, case.variant, case.param_dict)

    def run_vendor(self, name: str, problem: TrainProblem) -> dict | None:
        """PyTorch's row `name`: torch-eager and torch-graph on one process, torch-ddp (PyTorch DDP
        over the same ranks) in a data-parallel run; None for a row that does not belong to this run."""
        self.prepare(problem)
        mode = name.removeprefix("torch-")
        if (mode == "ddp") != (self.options.world is not None) or (mode == "ddp" and problem.batch == 1):
            return None
        rec, out = self.trainer.torch(mode)
        return self._finish(rec, out, problem)


WORKLOAD = TrainWorkload()
