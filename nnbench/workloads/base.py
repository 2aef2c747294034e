"""The workload contract: what every workload declares, so that one harness serves them all.

After nvbench's "a benchmark is axes plus a function of a state":
- **axes**: the variant parameters (the registry's, per variant) and the problem axes, which a
  workload parses from a sweep config's `shapes:` and builds from its command's options;
- **a problem** (one point of the problem axes) knows its label, its axes as a dict, and its
  counters (FLOPs and the fewest bytes one timed unit moves);
- **a session** builds a problem's inputs and float64 reference, and runs one case: it verifies
  it (outputs poisoned first) and times it through `measure`, returning one flat record;
- **vendor rows** (cuBLAS, cuDNN, PyTorch) are named per problem and run by the same session,
  through the same `measure` and verifier (nnbench/runtime/vendor.py);
- the **harness** (nnbench/harness.py: commands in-process; nnbench/sweeps/sweep.py: sweeps in a worker)
  iterates the axes, derives the throughput and comparison columns, and writes the one record
  schema of nnbench/results.py. Sweeps, the gate, profile, tables and plots are written once.

A workload module defines one `Workload` subclass and is listed in `nnbench.workloads.WORKLOADS`;
docs/ARCHITECTURE.md says which files a new one touches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from nnbench import expr, registry, space
from nnbench.errors import NnbenchError
from nnbench.registry import Variant
from nnbench.yamlnodes import ConfigError, fail, mapping, scalar, sequence, where

# A row's status where no kernel ran and the config's float64 reference was timed and checked instead (the CPU
# backend); such a row's variant is REFERENCE_VARIANT. nnbench/results.py lists every status.
REFERENCE = "REFERENCE"
REFERENCE_VARIANT = "reference"


@dataclass(frozen=True)
class Case:
    """One point of a variant's parameter axes."""

    variant: Variant
    params: tuple[tuple[str, int], ...] = ()

    @property
    def param_dict(self) -> dict[str, int]:
        return dict(self.params)

    @property
    def param_label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.params)

    @staticmethod
    def defaults(v: Variant) -> Case:
        return Case(v, tuple(v.defaults().items()))


class Problem(Protocol):
    """One point of a workload's problem axes."""

    @property
    def label(self) -> str: ...  # the record's `shape` column: what a reader calls this problem

    def as_dict(self) -> dict[str, Any]: ...  # the axes, recorded as `problem` ("M=4096 N=4096 K=4096")

    @property
    def flops(self) -> float: ...  # per timed unit (a launch, an iteration, a step)

    @property
    def bytes(self) -> float: ...


def problem_text(p: Problem) -> str:
    return " ".join(f"{k}={v}" for k, v in p.as_dict().items())


@dataclass
class TimeSplit:
    """Where one timed unit of a case (an iteration, a step) goes, part by part: what `nnbench profile --split KIND`
    shows (KIND one of the workload's `splits`). Times are in seconds; `timed` names the row fields that are
    times of the part and are summed for its share of `whole_s`, the unit timed whole; `counts` names integer
    fields shown beside them. `ceilings`: the measured device ceilings (nnbench.profiling.ceilings' keys) that
    bound the parts, which the profiler measures and fills into `ceiling_values`. `status` is the float64
    check of what was timed: a split of a build that fails it has no rows."""

    kind: str
    unit: str  # what whole_s times: "iteration", "step"
    how: str  # how the parts and the whole were timed, in words
    whole_s: float | None = None
    timed: tuple[str, ...] = ()
    counts: tuple[str, ...] = ()
    rows: list[dict] = field(default_factory=list)  # each: "part", then `counts` and `timed` fields
    display: str = "us"  # the table's time unit: "us" or "ms"
    rel_err: float | None = None
    rtol: float | None = None
    status: str = "PASS"
    ceilings: tuple[str, ...] = ()
    ceiling_values: dict[str, float] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def part_s(self, row: dict) -> float:
        return sum(row[c] for c in self.timed)

    @property
    def parts_s(self) -> float:
        return sum(self.part_s(r) for r in self.rows)

    def share(self, row: dict) -> float | None:
        return self.part_s(row) / self.whole_s if self.whole_s else None


class Session:
    """A backend's workspace for one workload's cases; a sweep worker keeps one per process.

    `prepare(problem, following)` builds (or reuses) the problem's inputs and reference and may
    start on the following problem in the background; `run_case` and `run_vendor` return one
    record each (status PASS, FAIL, ERROR or SKIP; `fault=True` when the context is poisoned).
    """

    # nnbench/runtime/autotune.py's Tuner where the command autotunes (harness.run sets it), else None:
    # the fixed tiles, as a sweep's cases (each names its parameters) always run.
    tuner = None

    def warm_up(self) -> None:
        pass

    def base_record(self, problem) -> dict:
        """The fields every record of this problem carries: workload, shape, problem, counters, settings."""
        raise NotImplementedError

    def prepare(self, problem, following=None) -> None:
        pass

    def run_vendor(self, name: str, problem) -> dict | None:
        """The vendor row `name` for this problem, or None where its library is not available."""
        return None

    def run_case(self, case: Case, problem, compiled) -> dict:
        raise NotImplementedError

    def breakdown(self, rec: dict) -> list[dict]:
        """The rows a command shows for a case's or vendor row's record, in order: the record itself and
        what the session measured along with it that is no case of its own (LeNet-5's forward pass, its
        host-issued and graph steps). A sweep keeps the record alone."""
        return [rec]

    def time_split(self, kind: str, case: Case, problem) -> TimeSplit:
        """The case's unit split into its parts (`Workload.splits`), on a GPU, after the case's own check;
        called only where `Workload.split_refusal` has none."""
        raise NotImplementedError


class Workload:
    """A workload's declaration. Subclasses set the class attributes and implement the methods."""

    name: str = ""  # its package's name: the record's `workload`, the sweep config's `workload:`, Variant.workload
    table: tuple[Variant, ...] = ()  # the variants its package ships (variants.py's VARIANTS)
    unit: str = "launch"  # what one timed sample is, per which the median is reported
    default_rtol: float | None = 5e-5  # None: the session derives each case's limit itself
    vendor: str | None = None  # the vendor row that `pct_vendor` compares with
    baseline: str | None = None  # the variant that `speedup` is over, at its defaults, when a run names none
    vendor_rows: tuple[str, ...] = ()  # every vendor row it can add, in order
    # The time splits `nnbench profile --split KIND` shows for its cases (Session.time_split): KIND -> what it splits
    splits: dict[str, str] = {}

    def variants(self, backend: str | None = None) -> list[Variant]:
        return registry.of_workload(self.table, self.name, backend)

    def runs_on(self, v: Variant, backend: str) -> bool:
        """Whether the variant runs on this backend (a GPU sweep SKIPs host variants unless they say so)."""
        return v.backend == backend

    def applies(self, case: Case, problem) -> bool:
        """Whether the case belongs with the problem at all (not run, not counted, when false)."""
        return True

    def refusal(self, case: Case, problem) -> str | None:
        """Why this case cannot run on this problem (a SKIP row), before anything is compiled."""
        return None

    def split_refusal(self, kind: str, case: Case, problem) -> str | None:
        """Why the case on this problem has no split `kind` of `splits` (one line naming the option and what
        it needs), before anything runs; None where it has one."""
        return None

    def parse_problems(self, path: Path, node) -> list:
        """One item of a sweep config's `shapes:` list, as problems (yamlnodes' errors name file:line)."""
        raise NotImplementedError

    def validate(self, problem) -> None:
        """Raise NnbenchError for a problem that can never run (index range, memory)."""

    def footprint(self, problem) -> tuple[float, float] | None:
        """(host bytes, device bytes) the problem needs at its peak, estimated before anything is made; None where
        the workload does not say."""
        return None

    def vendor_wanted(self, name: str, cases: list[Case]) -> bool:
        """Whether vendor row `name` belongs to a run of these cases (all do, unless a workload says)."""
        return True

    def vendor_names(self, backend: str) -> list[str]:
        """The vendor rows this backend can run for each problem."""
        return list(self.vendor_rows) if backend == "cuda" else []

    def compile(self, arch: str, cases: list[Case], jobs: int | None = None) -> dict[Case, object]:
        """Every distinct kernel, compiled in parallel: Case -> Compiled or CompileError. A variant with
        an architecture-specific target (sm_90a) is built for that target."""
        from nnbench import paths
        from nnbench.runtime.compile import CompileRequest, compile_many
        todo = [c for c in cases if c.variant.source]
        reqs = [CompileRequest.make(paths.KERNELS / c.variant.source, c.param_dict, c.variant.target(arch))
                for c in todo]
        return dict(zip(todo, compile_many(reqs, jobs=jobs, return_errors=True)))

    def registers(self, case: Case, compiled) -> int | None:
        """Registers per thread of the case's main kernel, once ptxas has said (for device limits)."""
        info = getattr(compiled, "ptxas", {}).get(case.variant.kernel)
        return info.registers if info else None

    def session(self, backend, settings, rtol: float, seed: int, env: dict, options=None) -> Session:
        """The workload's session; `options`: a command's run options beyond the problem and the timing
        (the workload's own dataclass: progress callbacks, data-parallel ranks; None: the defaults)."""
        raise NotImplementedError


# -- a variant's axes and restrictions in YAML, as cases (sweep configs and kernel configs) --------
@dataclass
class VariantCount:
    """How one variant's axes became cases: the product, minus restrictions, minus its own rules."""

    variant: str
    product: int = 0
    restricted: int = 0  # excluded by the sweep's restrictions
    invalid: int = 0  # excluded by the variant's rules in the registry
    cases: int = 0


def variant_cases(path: Path, v: Variant, body) -> tuple[list[Case], VariantCount]:
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
            values = space.axis_values(path, vals, f"{what}.axes.{aname}")
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


def _is_null(node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag.endswith(":null")
