"""The harness: a workload's cases over its problems, in this process, as one stream of records.

Every command that runs kernels (`gemm`, `train`, `conv`) goes through `run`; a sweep runs the
same session in a worker process (nnbench/sweeps/sweep.py) and derives its columns with the same
`Comparisons`. Per problem: the vendor rows first (cuBLAS, cuDNN, PyTorch: `measure`d and
verified by the same session), then the cases in the order given, so each record can carry its
comparisons the moment it is written.
"""

from __future__ import annotations

from collections.abc import Iterator

from nnbench import audit, sanitize
from nnbench.errors import NnbenchError
from nnbench.runtime import provenance
from nnbench.workloads.base import Case, Workload


class Comparisons:
    """Fills the columns that need other records: throughput from the counters, % of the vendor
    row and speedup over the baseline case, per problem (the record's `shape`)."""

    def __init__(self, workload: Workload, baseline: Case | None = None) -> None:
        self.vendor = workload.vendor
        self.baseline = baseline
        self.baseline_label = f"{baseline.variant.name} {baseline.param_label}".strip() if baseline else None
        self.vendor_ms: dict[tuple[str, str], float] = {}  # (vendor row, shape)
        self.baseline_ms: dict[str, float] = {}

    def is_baseline(self, rec: dict) -> bool:
        b = self.baseline
        return b is not None and rec.get("variant") == b.variant.name and rec.get("params", "") == b.param_label

    def remember(self, rec: dict) -> None:
        """Take the vendor's or the baseline's time from a record (also a resumed one)."""
        if rec.get("status") != "PASS" or not rec.get("median_ms"):
            return
        if self.vendor and rec.get("variant") in (self.vendor, rec.get("vendor")):  # a row may name its own vendor
            self.vendor_ms[rec["variant"], rec["shape"]] = rec["median_ms"]
        elif self.is_baseline(rec):
            self.baseline_ms[rec["shape"]] = rec["median_ms"]

    def derive(self, rec: dict) -> dict:
        self.remember(rec)
        ms = rec.get("median_ms")
        if not ms or rec.get("status") not in ("PASS", "FAIL", "SUSPECT"):
            return rec
        t = ms * 1e-3
        if rec.get("flops") and rec.get("gflops") is None:
            rec["gflops"] = rec["flops"] / t / 1e9
        if rec.get("bytes") and rec.get("gbs") is None:
            rec["gbs"] = rec["bytes"] / t / 1e9
        if rec.get("flops") and rec.get("energy_j") and rec.get("gflops_per_j") is None:
            rec["gflops_per_j"] = rec["flops"] / rec["energy_j"] / 1e9
        vendor = rec.get("vendor") or self.vendor
        if vendor and rec.get("variant") != vendor:
            vendor_ms = self.vendor_ms.get((vendor, rec.get("shape")))
            rec["vendor"] = vendor
            rec["pct_vendor"] = 100 * vendor_ms / ms if vendor_ms else None
        base_ms = self.baseline_ms.get(rec.get("shape"))
        if base_ms:
            rec["speedup"], rec["speedup_over"] = base_ms / ms, self.baseline_label
        return rec


def run(workload: Workload, backend, cases: list[Case], problems: list, settings, rtol: float,
        seed: int | None = None, env: dict | None = None, vendor: bool = True,
        baseline: Case | None = None, options=None, tuner=None, compiled: dict | None = None) -> Iterator[dict]:
    """Yield one record per (problem, vendor row or case), each followed by the rows the session
    measured along with it (Session.breakdown). A kernel fault ends the run after its ERROR record:
    the context is poisoned, and everything before it is already yielded. `options` go to the
    workload's session (Workload.session); `tuner` (nnbench/runtime/autotune.py): the session picks
    its tiles per problem by timing them. `compiled`: the cases' modules (Workload.compile) where the caller
    compiled them once for many runs (a soak's seeds), else compiled here."""
    import numpy as np
    tool, child = sanitize.MODE["tool"], sanitize.MODE["child"]
    audit.UNTIMED[0] = child is not None  # each run as its own mode says, none as an earlier run's
    if child is not None:
        from nnbench import measure
        measure.ENERGY[0] = False  # no energy window under the sanitizer: the launches are there to be checked
        if settings is not None:  # (a trainer's session times with its own settings)
            settings = sanitize.CHILD_SETTINGS
    if tool is not None or child is not None:
        vendor = False  # the libraries' kernels are not ours to sanitize
        if not backend.runs_kernels:
            raise NnbenchError(f"--sanitize: needs a GPU (this run is on the {backend.name} backend)")
    seed = int(np.random.SeedSequence().entropy % 2**32) if seed is None else seed
    session = workload.session(backend, settings, rtol, seed, env or {}, options)
    session.tuner = tuner
    if compiled is None:
        compiled = workload.compile(backend.arch, cases) if backend.runs_kernels else {}
    comparisons = Comparisons(workload, baseline or _default_baseline(workload, cases))
    session.warm_up()
    if tool is not None:  # the cases' processes, several at once, their rows in the cases' order
        yield from sanitize.in_order(_to_sanitize(workload, session, cases, problems, tool, env or {}),
                                     sanitize.MODE["jobs"] or 1)
        return
    index = -1  # the runnable cases so far, counted alike in a sanitizing parent and its child
    for i, problem in enumerate(problems):
        taken = _taken(workload, cases, problem)
        if child is not None:
            runnable = sum(1 for _, why in taken if not why)
            if not index < child <= index + runnable:
                index += runnable
                continue
        session.prepare(problem, problems[i + 1] if i + 1 < len(problems) else None)
        if vendor:
            for name in [n for n in workload.vendor_names(backend.name) if workload.vendor_wanted(n, cases)]:
                rec = session.run_vendor(name, problem)
                if rec is not None:
                    yield from (comparisons.derive(provenance.stamp(r, None, env or {}))
                                for r in session.breakdown(rec))
        for case, why in taken:
            if why:
                yield _skip(session, case, problem, why, env or {})
                continue
            index += 1
            if child is not None and index != child:
                continue
            rec = provenance.stamp(session.run_case(case, problem, compiled.get(case)), case.variant, env or {})
            if child is not None:
                sanitize.write_child_record(rec)
                yield rec
                return
            yield from (comparisons.derive(provenance.stamp(r, case.variant, env or {}))
                        for r in session.breakdown(rec))
            if rec.get("fault"):
                return


def _taken(workload: Workload, cases: list[Case], problem) -> list[tuple[Case, str | None]]:
    """The cases that apply to `problem`, each with why it is refused there (None: it runs). A sanitizing parent
    and its child number the runnable ones from this same list."""
    return [(case, workload.refusal(case, problem)) for case in cases if workload.applies(case, problem)]


def _case_record(session, case: Case, problem) -> dict:
    return dict(session.base_record(problem), variant=case.variant.name, step=case.variant.step,
                params=case.param_label, precision=case.variant.precision)


def _skip(session, case: Case, problem, why: str, env: dict) -> dict:
    return provenance.stamp(dict(_case_record(session, case, problem), status="SKIP", error=why), case.variant, env)


def _to_sanitize(workload: Workload, session, cases: list[Case], problems: list, tool: str, env: dict):
    """A sanitizing parent's work, for sanitize.in_order: each refused case's SKIP row, and for each runnable case
    (numbered as the child counts them) the call that runs its process. The parent launches nothing itself, so it
    prepares no problem."""
    index = -1
    for problem in problems:
        for case, why in _taken(workload, cases, problem):
            if why:
                yield _skip(session, case, problem, why, env)
                continue
            index += 1
            base = _case_record(session, case, problem)
            yield lambda k=index, base=base, variant=case.variant: provenance.stamp(
                sanitize.run_case(tool, sanitize.MODE["argv"], k, base), variant, env)


def _default_baseline(workload: Workload, cases: list[Case]) -> Case | None:
    """The workload's baseline variant at its defaults, when the run includes it."""
    return next((c for c in cases if c.variant.name == workload.baseline and c == Case.defaults(c.variant)), None)
