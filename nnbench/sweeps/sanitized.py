"""`nnbench sweep CONFIG --sanitize TOOL`: the sweep's cases, each once under compute-sanitizer in a process of
its own (nnbench/sanitize.py), into a file of their own: a sanitized row has no timing, so the sweep's own result
file, which a later run resumes from, never holds one. The parent starts `nnbench sweep CONFIG ... --sanitize-child
K` for the K-th case of the plan (every part's cases in the sweep's order, vendor rows left out), several at once
(--sanitize-jobs); the child runs that case alone through the harness."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

from nnbench import harness, sanitize
from nnbench.sweeps.sweep import Job, _base_record, plan_jobs


def plan(specs, backend: str) -> list[tuple[object, Job]]:
    """The (spec, job) of every case a sanitized sweep runs, numbered alike in the parent and its children."""
    out = []
    for spec in specs:
        work = spec.workload
        out += [(spec, j) for j in plan_jobs(spec, False, backend)
                if work.runs_on(j.case.variant, backend) and not work.refusal(j.case, j.shape)]
    return out


def parent(specs, tool: str, argv: list[str], jobs: int = 1) -> Iterator[dict]:
    """Each case's row in the plan's order, up to `jobs` cases' processes at once (sanitize.in_order)."""
    work = (partial(sanitize.run_case, tool, argv, k, _base_record(spec, job, {}))
            for k, (spec, job) in enumerate(plan(specs, "cuda")))
    yield from sanitize.in_order(work, jobs)


def child(specs, index: int, backend, env: dict) -> Iterator[dict]:
    cases = plan(specs, backend.name)
    if not 0 <= index < len(cases):
        return
    spec, job = cases[index]
    sanitize.MODE["child"] = 0  # the one case of this harness run
    yield from harness.run(spec.workload, backend, [job.case], [job.shape], spec.settings, spec.rtol, seed=spec.seed,
                           env=dict(env, sweep=spec.name), vendor=False)
