"""YAML configs into validated cases, with file:line in every error.

YAML is composed (safe: `yaml.compose` builds plain nodes, never objects) so each value keeps the
line it came from; a bad key, type or value is reported as `file:line: key: problem; allowed: ...`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from nnbench import measure, memory, registry, workloads
from nnbench.errors import NnbenchError
from nnbench.sweeps import strategies
from nnbench.workloads import WORKLOADS
from nnbench.workloads import workload as find_workload
from nnbench.workloads.base import Case, VariantCount, variant_cases
from nnbench.workloads.gemm.problem import mnk
from nnbench.workloads.gemm.session import Shape
from nnbench.yamlnodes import (  # noqa: F401 - ConfigError: the error type of config files, re-exported
    ConfigError,
    boolean,
    compose,
    fail,
    integer,
    mapping,
    number,
    renamed,
    scalar,
    sequence,
    string,
)


@dataclass
class GemmConfig:
    cases: list[Case]
    sizes: list[Shape]


def load_gemm(path: Path) -> GemmConfig:
    """configs/gemm.yaml: parameter sets per variant, and sizes [M, N, K]."""
    path = Path(path)
    top = mapping(path, compose(path), "top level", ["variants", "sizes"])
    cases: list[Case] = []
    if "variants" in top:
        names = [v.name for v in workloads.variants_of("gemm", "cuda")]
        for name, (_, vnode) in mapping(path, top["variants"][1], "variants", names).items():
            v = workloads.get("gemm", name)
            for item in sequence(path, vnode, f"variants.{name}"):
                cases.append(_param_set(path, v, item, f"variants.{name}", blame=item))
    sizes = [mnk(path, item, "sizes") for item in sequence(path, top["sizes"][1], "sizes")] if "sizes" in top else []
    return GemmConfig(cases, sizes)


def _param_set(path: Path, v: registry.Variant, node, what: str, blame, rule_what: str | None = None) -> Case:
    """The variant's defaults with the mapping `node` ({TS: 32, ...}, or None) applied, checked
    against the variant's rules; a broken rule is reported at `blame`."""
    params = v.defaults()
    if node is not None:
        for pname, (_, pv) in mapping(path, node, what, [p.name for p in v.params]).items():
            params[pname] = integer(path, pv, f"{what}.{pname}")
    problems = v.problems(params)
    if problems:
        raise fail(path, blame, f"{rule_what or what}: {problems[0]}")
    return Case(v, tuple(params.items()))


# -- sweeps ---------------------------------------------------------------------------------------
SWEEP_KEYS = ["name", "workload", "description", "baseline", "vendor", "cublas", "seed", "shapes", "timing", "variants",
              "strategy", "budget"]
PART_KEYS = ["name", "description", "seed", "timing", "parts"]  # a config of several parts (one per workload)
TIMING_KEYS = ["budget", "cold", "min_samples", "max_noise", "min_sample_ms", "rtol", "watchdog", "keep_throttled"]


@dataclass
class SweepSpec:
    name: str
    workload_name: str  # the package under nnbench/workloads/ (`workload:` in the config)
    path: Path
    cases: list[Case]  # the baseline first, when it is not also a swept point
    shapes: list  # the workload's problems (GEMM shapes, conv layers, nets and batches)
    baseline: Case | None
    vendor: bool  # run the workload's vendor rows (cuBLAS, cuDNN, PyTorch)
    settings: measure.TimingSettings
    rtol: float
    watchdog_s: float
    seed: int
    counts: list[VariantCount]
    description: str = ""
    part: int = 0  # its place in a config of several parts (0: the only one)
    strategy: str = "brute_force"  # nnbench/sweeps/strategies.py: which cases of each shape run, in what order
    budget: strategies.Budget = strategies.Budget()  # per shape; none: every candidate

    @property
    def workload(self):
        return find_workload(self.workload_name)


def load_config(path: Path) -> list[SweepSpec]:
    """A sweep config: one sweep (see load_sweep), or `parts:`, a list of sweeps of any workloads that
    run one after another into one result file; the top level's name, description, seed and timing
    are every part's defaults (configs/ci.yaml gates three workloads so)."""
    path = Path(path)
    root = renamed(path, compose(path), "top level")
    from nnbench.workloads.kernel import session as kernel
    if kernel.is_kernel_config(root):  # a user's own .cu file (examples/vector_add)
        return [kernel_sweep(kernel.load(path, root))]
    if not (isinstance(root, yaml.MappingNode) and any(k.value == "parts" for k, _ in root.value)):
        return [load_sweep(path)]
    top = mapping(path, root, "top level", PART_KEYS, required=("parts",))
    items = sequence(path, top["parts"][1], "parts")
    if not items:
        raise fail(path, top["parts"][1], "parts: the list is empty")
    shared = {k: v for k, v in top.items() if k in ("name", "description", "seed", "timing")}
    specs = []
    for i, item in enumerate(items):
        body = mapping(path, renamed(path, item, f"parts[{i}]"), f"parts[{i}]", [k for k in SWEEP_KEYS if k != "name"],
                       required=("workload",))
        merged = dict(shared)
        if "timing" in body and "timing" in shared:  # a part's timing keys override the shared ones
            keys = mapping(path, shared["timing"][1], "timing", TIMING_KEYS)
            keys.update(mapping(path, body["timing"][1], f"parts[{i}].timing", TIMING_KEYS))
            body = dict(body, timing=(body["timing"][0], yaml.MappingNode("tag:yaml.org,2002:map",
                                                                          [(k, v) for k, v in keys.values()])))
        merged.update(body)
        specs.append(load_sweep(path, merged, part=i + 1))
    return specs


def kernel_sweep(d) -> SweepSpec:
    """A user's kernel config (nnbench/workloads/kernel) as a sweep: its declaration, with the
    sweep's own timing and search settings."""
    settings, cfg_rtol, watchdog = timing_settings(d.path, d.top, None)
    if cfg_rtol is not None:
        raise fail(d.path, d.top["timing"][1], "timing.rtol: a kernel config gives `rtol:` at the top level (an "
                                               "expression over the problem axes)")
    strategy, budget = search_settings(d.path, d.top)
    return SweepSpec(d.name, "kernel", d.path, d.cases, d.problems, d.baseline, False, settings, d.rtol, watchdog,
                     d.seed, d.counts, d.description, strategy=strategy, budget=budget)


def load_sweep(path: Path, top: dict | None = None, part: int = 0) -> SweepSpec:
    """A sweep config: workload, variants with axes and restrictions, shapes, timing. See configs/gemm_sweep.yaml.
    `top` is a part's keys (load_config) instead of the file's top level."""
    path = Path(path)
    if top is None:
        top = mapping(path, renamed(path, compose(path), "top level"), "top level", SWEEP_KEYS,
                      required=("workload", "variants", "shapes"))
    for key in ("variants", "shapes"):
        if key not in top:
            raise fail(path, top["workload"][1], f"{key}: missing; a sweep needs workload, variants and shapes")
    name = string(path, top["name"][1], "name") if "name" in top else path.stem
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise fail(path, top["name"][1], f"name: {name!r} may use only letters, digits, '_', '-' and '.'")
    workload = string(path, top["workload"][1], "workload", list(WORKLOADS))  # as listed now (NNBENCH_WORKLOADS too)
    work = find_workload(workload)

    cases: list[Case] = []
    counts: list[VariantCount] = []
    vnode = top["variants"][1]
    known = {v.name: v for v in work.variants()}
    for vname, (_, body) in mapping(path, vnode, "variants", list(known)).items():
        got, count = variant_cases(path, known[vname], body)
        cases += got
        counts.append(count)
    if not cases:
        raise fail(path, vnode, "variants: every point was excluded; nothing to run")

    baseline = None
    if "baseline" in top:
        baseline = _baseline(path, known, top["baseline"][1])
        if baseline in cases:  # it runs first for each shape, so every later row can carry its speedup
            cases.remove(baseline)
        cases.insert(0, baseline)

    shapes = []
    for item in sequence(path, top["shapes"][1], "shapes"):
        for s in work.parse_problems(path, item):
            try:
                work.validate(s)
                if (need := work.footprint(s)) is not None:  # every shape, before a worker allocates any
                    memory.require_host(need[0], f"shape {s.label}")
            except NnbenchError as e:
                raise fail(path, item, f"shapes: {e}") from None
            shapes.append(s)
    shapes = list(dict.fromkeys(shapes))
    if not shapes:
        raise fail(path, top["shapes"][1], "shapes: the list is empty")

    settings, rtol, watchdog = timing_settings(path, top, work.default_rtol)
    seed = integer(path, top["seed"][1], "seed", minimum=0) if "seed" in top else 0
    if "vendor" in top and "cublas" in top:
        raise fail(path, top["cublas"][0], "cublas: the old name of vendor; give one of them")
    vkey = "vendor" if "vendor" in top else "cublas"  # vendor rows (cuBLAS, cuDNN, PyTorch): on by default
    vendor = boolean(path, top[vkey][1], vkey) if vkey in top else True
    desc = scalar(path, top["description"][1], "description") if "description" in top else ""
    strategy, budget = search_settings(path, top)
    return SweepSpec(name, workload, path, cases, shapes, baseline, vendor, settings, rtol, watchdog, seed, counts,
                     desc, part, strategy, budget)


def search_settings(path: Path, top: dict) -> tuple[str, strategies.Budget]:
    """`strategy: NAME` and `budget: {cases: N}` or `{seconds: S}` (per shape; both: whichever ends first).
    A sampling strategy without a budget would evaluate every candidate, so it is refused."""
    strategy = string(path, top["strategy"][1], "strategy", list(strategies.STRATEGIES)) if "strategy" in top \
        else "brute_force"
    budget = strategies.Budget()
    if "budget" in top:
        node = top["budget"][1]
        keys = mapping(path, node, "budget", list(strategies.BUDGET_KEYS))
        if not keys:
            raise fail(path, node, "budget: give cases: N (evaluations per shape) or seconds: S (per shape)")
        budget = strategies.Budget(
            cases=integer(path, keys["cases"][1], "budget.cases", minimum=1) if "cases" in keys else None,
            seconds=number(path, keys["seconds"][1], "budget.seconds", positive=True) if "seconds" in keys else None)
    elif strategy != "brute_force":
        raise fail(path, top["strategy"][1], f"strategy: {strategy} needs a budget; add budget: {{cases: N}} or "
                                             "budget: {seconds: S} (per shape)")
    return strategy, budget


def timing_settings(path: Path, top: dict, default_rtol: float | None) -> tuple[measure.TimingSettings, float, float]:
    """A config's `timing:` block: (settings, rtol, watchdog seconds)."""
    timing = mapping(path, top["timing"][1], "timing", TIMING_KEYS) if "timing" in top else {}
    t = {k: v for k, (_, v) in timing.items()}
    settings = measure.TimingSettings(
        budget_s=number(path, t["budget"], "timing.budget", positive=True) if "budget" in t else 0.5,
        cold=boolean(path, t["cold"], "timing.cold") if "cold" in t else False,
        min_samples=integer(path, t["min_samples"], "timing.min_samples", minimum=1) if "min_samples" in t else 10,
        max_noise=number(path, t["max_noise"], "timing.max_noise", positive=True) if "max_noise" in t else 0.01,
        min_sample_ms=number(path, t["min_sample_ms"], "timing.min_sample_ms", positive=True)
        if "min_sample_ms" in t else 0.05,
        keep_throttled=boolean(path, t["keep_throttled"], "timing.keep_throttled") if "keep_throttled" in t else False,
    )
    rtol = number(path, t["rtol"], "timing.rtol", positive=True) if "rtol" in t else default_rtol
    watchdog = number(path, t["watchdog"], "timing.watchdog", positive=True) if "watchdog" in t else 60.0
    return settings, rtol, watchdog


def _baseline(path: Path, known: dict, node) -> Case:
    """`baseline: naive` (its defaults) or `baseline: {variant: tiled, params: {TS: 32}}`."""
    names = list(known)
    if isinstance(node, yaml.ScalarNode):
        v = known[string(path, node, "baseline", names)]
        return Case(v, tuple(v.defaults().items()))
    keys = mapping(path, node, "baseline", ["variant", "params"], required=("variant",))
    v = known[string(path, keys["variant"][1], "baseline.variant", names)]
    return _param_set(path, v, keys["params"][1] if "params" in keys else None, "baseline.params", blame=node,
                      rule_what="baseline")


def _is_null(node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag.endswith(":null")
