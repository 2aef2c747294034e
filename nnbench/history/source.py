"""Results files in, runs out: the one place that knows how a record carries its raw samples and energy.

A file becomes one run per (commit, GPU, sweep name) it holds: a file normally has one of each; a sweep resumed
after a commit has two commits; a file of repeated runs labels each run's sweep. Within a run a case recorded
twice (a resumed sweep, a retried ERROR) keeps its last record, as the gate does. A run's digest is a hash of its
records, so recording the same file twice stores it once.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from nnbench import results
from nnbench.errors import NnbenchError


@dataclass
class Case:
    """One case of a run: the flat record (results.FIELDS; numbers as floats, empty as None) and its raw
    samples in ms (None where the file has none)."""

    fields: dict
    samples_ms: list[float] | None = None
    line: int = 0  # where the file holds it, for messages

    @property
    def key(self) -> str:
        return results.case_key_of(self.fields)


@dataclass
class Run:
    commit_sha: str
    gpu: str
    host: str | None
    run_time: str
    nnbench_version: str | None
    source: str
    cases: list[Case] = field(default_factory=list)

    @property
    def digest(self) -> str:
        h = hashlib.sha256()
        for c in self.cases:
            h.update(json.dumps([c.fields, c.samples_ms], sort_keys=True, default=str).encode())
        return h.hexdigest()


def read(path: str | Path) -> list[Run]:
    """The runs in one results file (a result CSV, or a `--json` results file)."""
    cases = _cases(Path(path))
    if not cases:
        raise NnbenchError(f"{path}: no records to record")
    results.refuse_sanitized(path, [c.fields.get("sanitizer") or "" for c in cases], "a history")
    runs: dict[tuple[str, str, str], Run] = {}
    latest: dict[tuple[str, str, str], dict[str, Case]] = {}  # each run's cases by key: linear in the file's records
    for c in cases:
        f = c.fields
        _check_stamp(path, c)
        sha, gpu = str(f.get("git_sha") or "unknown"), str(f.get("gpu") or "cpu")
        ident = (sha, gpu, str(f.get("sweep") or ""))
        run = runs.get(ident)
        if run is None:
            run = runs[ident] = Run(sha, gpu, f.get("host"), str(f.get("timestamp") or ""), f.get("nnbench_version"),
                                    str(path))
        stamp = str(f.get("timestamp") or "")
        if stamp and (not run.run_time or stamp < run.run_time):
            run.run_time = stamp
        kept = latest.setdefault(ident, {})
        kept.pop(c.key, None)  # a case recorded again moves to where its last record is, as before
        kept[c.key] = c
    for ident, run in runs.items():
        run.cases = list(latest[ident].values())
        if not run.run_time:
            raise NnbenchError(f"{path}: records of {run.commit_sha} on {run.gpu} have no timestamp; not an nnbench "
                               "result file")
    return list(runs.values())


def energy(fields: dict) -> tuple[float | None, float | None]:
    """(J per timed unit, average W) where the record has them (NVML builds), else (None, None)."""
    return _number(fields.get("energy_j")), _number(fields.get("power_w"))


# A commit as results carry it: git's short SHA (-dirty), NNBENCH_GIT_SHA's name for it, or "unknown".
COMMIT = re.compile(r"[0-9A-Za-z][0-9A-Za-z._/+-]{0,63}")


def _check_stamp(path, case: Case) -> None:
    """What a run is stored under (its commit and time) is checked, not stored as given: a history would sort and
    group by garbage, or hold a 5,000-character "commit" in every row."""
    sha, stamp = case.fields.get("git_sha"), case.fields.get("timestamp")
    if sha not in (None, "") and not (isinstance(sha, str) and COMMIT.fullmatch(sha)):
        raise NnbenchError(f"{path}:{case.line}: git_sha {str(sha)[:40]!r}{'...' if len(str(sha)) > 40 else ''}: "
                           "expected a commit (at most 64 letters, digits and . _ / + -)")
    if stamp not in (None, ""):
        try:
            dt.datetime.fromisoformat(str(stamp))
        except ValueError:
            raise NnbenchError(f"{path}:{case.line}: timestamp {str(stamp)[:40]!r}: expected an ISO 8601 time "
                               "(2026-01-31T12:00:00+00:00)") from None


def _number(v) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _cases(path: Path) -> list[Case]:
    """Through the gate's own reader (rawresults: a result CSV or a --json file, with raw samples where kept);
    rows without a valid status (cut short by a kill) are left out, as the gate leaves them out."""
    from nnbench import rawresults
    recs = [r for r in rawresults.load(path) if r.fields.get("status") in results.STATUSES]
    for r in recs[:1]:  # a history is each case's median over commits: a file without one has nothing to give it
        missing = [k for k in ("variant", "median_ms") if k not in r.fields]
        if missing:
            raise NnbenchError(f"{path}: no {' or '.join(missing)} column; a history records each case's median")
    return [Case({k: v for k, v in r.fields.items() if k != "samples_ms"},
                 None if r.samples_ms is None else [float(x) for x in r.samples_ms], r.line)
            for r in recs]
