"""YAML configs into validated cases, with file:line in every error.

YAML is composed (safe: `yaml.compose` builds plain nodes, never objects) so each value keeps the
line it came from; a bad key, type or value is reported as `file:line: key: problem; allowed: ...`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from nnbench import expr, measure, nets, paths, registry, space
from nnbench.errors import NnbenchError
from nnbench.suites import WORKLOADS
from nnbench.suites import workload as find_workload
from nnbench.suites.base import Case
from nnbench.suites.gemm import Shape
from nnbench.yamlnodes import (
    ConfigError,
    boolean,
    compose,
    fail,
    integer,
    mapping,
    number,
    scalar,
    sequence,
    string,
    where,
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
        names = [v.name for v in registry.suite_variants("gemm", "cuda")]
        for name, (_, vnode) in mapping(path, top["variants"][1], "variants", names).items():
            v = registry.get("gemm", name)
            for item in sequence(path, vnode, f"variants.{name}"):
                cases.append(_param_set(path, v, item, f"variants.{name}", blame=item))
    sizes = [_mnk(path, item, "sizes") for item in sequence(path, top["sizes"][1], "sizes")] if "sizes" in top else []
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


def _mnk(path: Path, node, what: str) -> Shape:
    dims = sequence(path, node, what)
    if len(dims) != 3:
        raise fail(path, node, f"{what}: expected [M, N, K], got {len(dims)} values")
    return Shape(*(integer(path, d, what, minimum=1) for d in dims))


# -- sweeps ---------------------------------------------------------------------------------------
SWEEP_KEYS = ["name", "suite", "description", "baseline", "vendor", "cublas", "seed", "shapes", "timing", "variants"]
PART_KEYS = ["name", "description", "seed", "timing", "parts"]  # a config of several parts (one per suite)
SWEEP_SUITES = list(WORKLOADS)
TIMING_KEYS = ["budget", "cold", "min_samples", "max_noise", "min_sample_ms", "rtol", "watchdog", "keep_throttled"]
AXIS_FORMS = "a value, a list, {start, stop, step} or {pow2: [lo, hi]}"


@dataclass
class VariantCount:
    """How one variant's axes became cases: the product, minus restrictions, minus its own rules."""

    variant: str
    product: int = 0
    restricted: int = 0  # excluded by the sweep's restrictions
    invalid: int = 0  # excluded by the variant's rules in the registry
    cases: int = 0


@dataclass
class SweepSpec:
    name: str
    suite: str
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

    @property
    def workload(self):
        return find_workload(self.suite)


def load_config(path: Path) -> list[SweepSpec]:
    """A sweep config: one sweep (see load_sweep), or `parts:`, a list of sweeps of any suites that
    run one after another into one result file; the top level's name, description, seed and timing
    are every part's defaults (configs/ci.yaml gates three suites so)."""
    path = Path(path)
    root = compose(path)
    from nnbench.suites import kernel
    if kernel.is_kernel_config(root):  # a user's own .cu file (examples/vector_add)
        return [kernel.load(path, root)]
    if not (isinstance(root, yaml.MappingNode) and any(k.value == "parts" for k, _ in root.value)):
        return [load_sweep(path)]
    top = mapping(path, root, "top level", PART_KEYS, required=("parts",))
    items = sequence(path, top["parts"][1], "parts")
    if not items:
        raise fail(path, top["parts"][1], "parts: the list is empty")
    shared = {k: v for k, v in top.items() if k in ("name", "description", "seed", "timing")}
    specs = []
    for i, item in enumerate(items):
        body = mapping(path, item, f"parts[{i}]", [k for k in SWEEP_KEYS if k != "name"], required=("suite",))
        merged = dict(shared)
        if "timing" in body and "timing" in shared:  # a part's timing keys override the shared ones
            keys = mapping(path, shared["timing"][1], "timing", TIMING_KEYS)
            keys.update(mapping(path, body["timing"][1], f"parts[{i}].timing", TIMING_KEYS))
            body = dict(body, timing=(body["timing"][0], yaml.MappingNode("tag:yaml.org,2002:map",
                                                                          [(k, v) for k, v in keys.values()])))
        merged.update(body)
        specs.append(load_sweep(path, merged, part=i + 1))
    return specs


def load_sweep(path: Path, top: dict | None = None, part: int = 0) -> SweepSpec:
    """A sweep config: suite, variants with axes and restrictions, shapes, timing. See configs/gemm_sweep.yaml.
    `top` is a part's keys (load_config) instead of the file's top level."""
    path = Path(path)
    if top is None:
        top = mapping(path, compose(path), "top level", SWEEP_KEYS, required=("suite", "variants", "shapes"))
    for key in ("variants", "shapes"):
        if key not in top:
            raise fail(path, top["suite"][1], f"{key}: missing; a sweep needs suite, variants and shapes")
    name = string(path, top["name"][1], "name") if "name" in top else path.stem
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise fail(path, top["name"][1], f"name: {name!r} may use only letters, digits, '_', '-' and '.'")
    suite = string(path, top["suite"][1], "suite", SWEEP_SUITES)
    work = find_workload(suite)

    cases: list[Case] = []
    counts: list[VariantCount] = []
    vnode = top["variants"][1]
    known = {v.name: v for v in work.variants()}
    for vname, (_, body) in mapping(path, vnode, "variants", list(known)).items():
        got, count = _variant_cases(path, known[vname], body)
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
    return SweepSpec(name, suite, path, cases, shapes, baseline, vendor, settings, rtol, watchdog, seed, counts, desc,
                     part)


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


def _variant_cases(path: Path, v: registry.Variant, body) -> tuple[list[Case], VariantCount]:
    what = f"variants.{v.name}"
    count = VariantCount(v.name)
    spec = {} if _is_null(body) else mapping(path, body, what, ["axes", "restrict"])
    by_lower = {p.name.lower(): p for p in v.params}
    axes: dict[str, tuple[int, ...]] = {}
    if "axes" in spec:
        for aname, (anode, vals) in mapping(path, spec["axes"][1], f"{what}.axes").items():
            p = by_lower.get(str(aname).lower())
            if p is None:
                allowed = ", ".join(q.name for q in v.params) or "(none: this variant has no parameters)"
                raise fail(path, anode, f"{what}.axes: {v.name} has no parameter {aname!r}; allowed: {allowed}")
            values = _axis_values(path, vals, f"{what}.axes.{aname}")
            for val, node in values:
                if val not in p.choices:
                    raise fail(path, node, f"{what}.axes.{aname}: {val} is not allowed; {v.name} allows {p.name} in "
                                           f"{{{', '.join(map(str, p.choices))}}}")
            axes[p.name] = tuple(dict.fromkeys(val for val, _ in values))
    for p in v.params:  # an axis not given stays at the variant's default
        axes.setdefault(p.name, (p.default,))
    restrictions = []
    if "restrict" in spec:
        rnode = spec["restrict"][1]
        items = [rnode] if isinstance(rnode, yaml.ScalarNode) else sequence(path, rnode, f"{what}.restrict")
        for item in items:
            text = scalar(path, item, f"{what}.restrict")
            try:
                expr.parse(text)
                expr.check_condition(text)
                space.check_names(space.Restriction(text), list(axes))
            except NnbenchError as e:
                raise fail(path, item, f"{what}.restrict: {e}") from None
            restrictions.append(space.Restriction(text, where(path, item)))
    try:
        exp = space.expand(axes, restrictions)
    except space.RestrictionError as e:  # blamed on the restriction's own line, not the variant's
        raise ConfigError(f"{e.restriction.where}: {what}.restrict: {e.message}") from None
    except NnbenchError as e:
        raise fail(path, spec["axes"][1] if "axes" in spec else body, f"{what}.axes: {e}") from None
    count.product, count.restricted = exp.total, exp.restricted
    cases = []
    for point in exp.points:
        if v.problems(point):
            count.invalid += 1
        else:
            cases.append(Case(v, tuple(point.items())))
    count.cases = len(cases)
    return cases, count


def _axis_values(path: Path, node, what: str) -> list[tuple[int, yaml.Node]]:
    """An axis's values, each with the node to blame in an error."""
    if isinstance(node, yaml.ScalarNode):
        return [(integer(path, node, what), node)]
    if isinstance(node, yaml.SequenceNode):
        if not node.value:
            raise fail(path, node, f"{what}: the list is empty")
        return [(integer(path, n, what), n) for n in node.value]
    keys = mapping(path, node, what, ["start", "stop", "step", "pow2"])
    try:
        if "pow2" in keys:
            if len(keys) > 1:
                raise fail(path, node, f"{what}: pow2 stands alone; write {{pow2: [lo, hi]}}")
            bounds = sequence(path, keys["pow2"][1], f"{what}.pow2")
            if len(bounds) != 2:
                raise fail(path, keys["pow2"][1], f"{what}.pow2: expected [lo, hi]")
            vals = space.powers_of_two(*(integer(path, b, f"{what}.pow2", minimum=1) for b in bounds))
        else:
            if "start" not in keys or "stop" not in keys:
                raise fail(path, node, f"{what}: expected {AXIS_FORMS}")
            step = integer(path, keys["step"][1], f"{what}.step", minimum=1) if "step" in keys else 1
            vals = space.int_range(integer(path, keys["start"][1], f"{what}.start"),
                                   integer(path, keys["stop"][1], f"{what}.stop"), step)
    except space.SpaceError as e:
        raise fail(path, node, f"{what}: {e}") from None
    return [(v, node) for v in vals]


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


def gemm_shapes(path: Path, node) -> list[Shape]:
    """[M, N, K], {set: square|skinny|odd} (configs/shapes.yaml), or {set: mlp, nets: [..], batch: B}."""
    if isinstance(node, yaml.SequenceNode):
        return [_mnk(path, node, "shapes")]
    if not isinstance(node, yaml.MappingNode):
        raise fail(path, node, "shapes: expected [M, N, K] or {set: NAME}")
    named = shape_sets()
    keys = mapping(path, node, "shapes", ["set", "nets", "batch"], required=("set",))
    which = string(path, keys["set"][1], "shapes.set", [*named, "mlp"])
    if which != "mlp":
        extra = [k for k in keys if k != "set"]
        if extra:
            raise fail(path, keys[extra[0]][0], f"shapes: {extra[0]!r} applies only to set: mlp")
        return named[which]
    known = nets.load()
    chosen = list(known)
    if "nets" in keys:
        chosen = [str(integer(path, n, "shapes.nets")) if n.tag.endswith(":int") else scalar(path, n, "shapes.nets")
                  for n in sequence(path, keys["nets"][1], "shapes.nets")]
        for n, item in zip(chosen, keys["nets"][1].value):
            if n not in known:
                raise fail(path, item, f"shapes.nets: no net {n!r}; nets: {', '.join(known)}")
    batch = integer(path, keys["batch"][1], "shapes.batch", minimum=1) if "batch" in keys else 256
    return [Shape(m, n, k) for name in chosen for _, m, n, k in known[name].training_gemms(batch)]


def shape_sets(path: Path = paths.CONFIGS / "shapes.yaml") -> dict[str, list[Shape]]:
    top = mapping(path, compose(path), "top level", ["sets"], required=("sets",))
    out = {}
    for name, (_, body) in mapping(path, top["sets"][1], "sets").items():
        out[name] = [s for item in sequence(path, body, f"sets.{name}") for s in gemm_shapes(path, item)]
    return out


def _is_null(node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag.endswith(":null")
