"""`nnbench sweep CONFIG --sanitize TOOL`: the sweep's cases, each once under compute-sanitizer in a process of
its own (nnbench/sanitize.py), into a file of their own: a sanitized row has no timing, so the sweep's own result
file, which a later run resumes from, never holds one. The parent starts `nnbench sweep CONFIG ... --sanitize-child
K` for the K-th case of the plan (every part's cases in the sweep's order, vendor rows left out), several at once
(--sanitize-jobs); the child runs that case alone through the harness.

A run resumes where its `--out` file exists (`done`): the cases that file holds a verdict of, PASS or FAIL, are
skipped, by the sweep's own case identity (sweep.read_done: workload, variant, parameters, problem, warm or cold),
unless its kernel, headers, flags or nnbench changed since (its provenance), an ERROR row's case again only with
--retry-errors; the new rows are added to it. Skipping is the parent's alone:
the child counts the whole plan, so K names the same case in both. A file of another tool is refused."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path

from nnbench import harness, results, sanitize
from nnbench.errors import NnbenchError
from nnbench.sweeps.sweep import Job, _base_record, _done_rows, job_key, job_provenance, plan_jobs, read_done


def plan(specs, backend: str) -> list[tuple[object, Job]]:
    """The (spec, job) of every case a sanitized sweep runs, numbered alike in the parent and its children."""
    out = []
    for spec in specs:
        work = spec.workload
        out += [(spec, j) for j in plan_jobs(spec, False, backend)
                if work.runs_on(j.case.variant, backend) and not work.refusal(j.case, j.shape)]
    return out


def parent(specs, tool: str, argv: list[str], jobs: int = 1, done: frozenset[str] = frozenset()) -> Iterator[dict]:
    """Each case's row in the plan's order, up to `jobs` cases' processes at once (sanitize.in_order), but the
    cases whose key is in `done`; K counts the whole plan, as the child does."""
    work = (partial(sanitize.run_case, tool, argv, k, _base_record(spec, job, {}))
            for k, (spec, job) in enumerate(plan(specs, "cuda")) if job_key(spec, job) not in done)
    yield from sanitize.in_order(work, jobs)


def done_cases(path: Path, specs, tool: str, retry_errors: bool) -> frozenset[str]:
    """The keys of the plan's cases the existing file at `path` holds a verdict of, for a resumed run of `tool`; a
    file whose rows another tool wrote (or none: a timed run's file) is refused."""
    refuse_another_tool(path, tool)
    keys: set[str] = set()
    planned = {job_key(spec, job): (spec, job) for spec, job in plan(specs, "cuda")}
    for workload in dict.fromkeys(spec.workload_name for spec in specs):
        envs: dict[str, dict] = {}  # each case's last row: the environment its provenance was taken in
        done = read_done(path, workload, retry_errors, None,
                         lambda row: envs.__setitem__(results.case_key_of(row), row))
        keys |= {k for k in done.keys & planned.keys() if not _edited(planned[k], done.provenance.get(k), envs[k])}
    return frozenset(keys)


def refuse_another_tool(path: Path, tool: str) -> None:
    """An --out file to resume under `tool` whose rows another tool wrote, or no sanitizer (a timed run's)."""
    for row in _done_rows(path):
        if (said := row_tool(row)) != tool:
            what = f"holds {said} rows" if said else "holds rows no sanitizer wrote (a timed run's?)"
            raise NnbenchError(f"--out {path}: {what}; this run is --sanitize {tool}: name another file")


def _edited(spec_job, provenance: str | None, row: dict) -> bool:
    """Whether a done row's case changed since (its kernel, headers, flags or nnbench): its provenance against the
    digest the case has now in the row's own environment (driver, CUDA, nvcc, compute capability), which the
    parent, opening no GPU, takes from the row; a row without provenance counts as changed."""
    spec, job = spec_job
    return provenance != job_provenance(spec, job, row)


def row_tool(row: dict) -> str | None:
    """The tool that wrote a sanitized row: `sanitizer` says it ("sanitized: TOOL", or "TOOL: <report line>"); an
    ERROR row has none there, and its error begins "TOOL: " (sanitize.verdict)."""
    said = str(row.get("sanitizer") or "")
    if said.startswith("sanitized: "):
        said = said.removeprefix("sanitized: ")
    head = (said or str(row.get("error") or "")).split(":", 1)[0].strip()
    return head if head in sanitize.TOOLS else None


def child(specs, index: int, backend, env: dict) -> Iterator[dict]:
    cases = plan(specs, backend.name)
    if not 0 <= index < len(cases):
        return
    spec, job = cases[index]
    sanitize.MODE["child"] = 0  # the one case of this harness run
    yield from harness.run(spec.workload, backend, [job.case], [job.shape], spec.settings, spec.rtol, seed=spec.seed,
                           env=dict(env, sweep=spec.name), vendor=False)
