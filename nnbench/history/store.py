"""Record runs into the history and read each case's series back, one point per commit.

A run is written in one transaction (its row and all its cases), so a failure part-way stores nothing and an
interrupted `history record` can simply be run again: a run already stored (same digest) is not stored twice,
even by two recorders at once (`ON CONFLICT DO NOTHING` on the digest).

A case's place in history is its commit's time (git's committer date, where the recorder's checkout knows the
commit), else the time the run was measured. Several runs of one commit are one point: the median of their
medians, and their raw samples pooled.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import json
import os
import subprocess
from dataclasses import dataclass

import numpy as np
import pandas as pd

from nnbench import paths
from nnbench.history import source
from nnbench.history.db import Database
from nnbench.version import __version__


@dataclass
class Recorded:
    run_id: int
    new: bool  # False: this run was already in the history (same records), nothing was added
    run: source.Run


def commit_time(sha: str) -> str | None:
    """The commit's committer date in UTC (ISO 8601), where this checkout knows the commit; else None."""
    sha = sha.removesuffix("-dirty")
    if not sha or sha == "unknown":
        return None
    try:
        out = subprocess.run(["git", "show", "-s", "--format=%cI", sha, "--"], cwd=paths.ROOT, capture_output=True,
                             text=True, timeout=10, env=dict(os.environ, GIT_OPTIONAL_LOCKS="0"))
    except (OSError, subprocess.SubprocessError):
        return None
    text = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
    try:
        return dt.datetime.fromisoformat(text).astimezone(dt.UTC).isoformat(timespec="seconds") if text else None
    except ValueError:
        return None


def matches(key: str, pattern: str) -> bool:
    """A case pattern: with `*`, `?` or `[`, a wildcard over the whole key; else a substring (any case)."""
    key, pattern = key.lower(), pattern.lower()
    return fnmatch.fnmatchcase(key, pattern) if any(ch in pattern for ch in "*?[") else pattern in key


def record(db: Database, run: source.Run, when: str | None = None) -> Recorded:
    """Store `run` (its row and every case) in one transaction; a run already stored is left as it is."""
    with db.transaction():
        return write(db, run, when)


def write(db: Database, run: source.Run, when: str | None = None) -> Recorded:
    """`record`'s work, inside a transaction the caller holds."""
    now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    digest = run.digest
    rows = []
    for c in run.cases:
        f = c.fields
        energy_j, power_w = source.energy(f)
        samples = json.dumps(c.samples_ms) if c.samples_ms is not None else None
        rows.append((c.key, f.get("workload"), f.get("variant"), f.get("params"), f.get("shape"), f.get("unit"),
                     f.get("status"), _float(f.get("median_ms")), _float(f.get("iqr_ms")), _float(f.get("min_ms")),
                     _float(f.get("mean_ms")), _int(f.get("samples")), energy_j, power_w, samples,
                     json.dumps(f, sort_keys=True, default=str)))
    got = db.query("INSERT INTO runs (digest, commit_sha, commit_time, run_time, recorded_at, gpu, host, source, "
                   "nnbench_version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (digest) DO NOTHING "
                   "RETURNING id",
                   (digest, run.commit_sha, when, run.run_time, now, run.gpu, run.host, run.source,
                    run.nnbench_version or __version__))
    if not got:
        return Recorded(int(db.query("SELECT id FROM runs WHERE digest = ?", (digest,))[0][0]), False, run)
    run_id = int(got[0][0])
    db.executemany("INSERT INTO cases (run_id, case_key, workload, variant, params, shape, unit, status, median_ms, "
                   "iqr_ms, min_ms, mean_ms, n_samples, energy_j, power_w, samples, record) VALUES (?, ?, ?, ?, ?, "
                   "?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", [(run_id, *r) for r in rows])
    return Recorded(run_id, True, run)


def runs(db: Database) -> pd.DataFrame:
    rows = db.query("SELECT r.id, r.commit_sha, r.commit_time, r.run_time, r.gpu, r.source, count(c.id) FROM runs r "
                    "LEFT JOIN cases c ON c.run_id = r.id GROUP BY r.id, r.commit_sha, r.commit_time, r.run_time, "
                    "r.gpu, r.source ORDER BY r.id")
    return pd.DataFrame(rows, columns=["id", "commit", "commit_time", "run_time", "gpu", "source", "cases"])


def points(db: Database, gpu: str | None = None, cases: tuple[str, ...] = (), keys: set[str] | None = None,
           with_samples: bool = False, exclude_digests: set[str] = frozenset()) -> pd.DataFrame:
    """Each case's series: one row per (gpu, case, commit) in history order, from the PASS records only.
    `cases` are patterns on the case key (workload|variant|params|shape|hot-or-cold; a plain word matches as a
    substring, `*` and `?` as wildcards); `keys` exact case keys."""
    where, params = ["c.status = 'PASS'", "c.median_ms > 0"], []
    if gpu:
        where.append("r.gpu = ?")
        params.append(gpu)
    samples = "c.samples" if with_samples else "NULL"
    rows = db.query(f"SELECT r.id, r.digest, r.commit_sha, COALESCE(r.commit_time, r.run_time), r.run_time, r.gpu, "
                    f"c.case_key, c.workload, c.variant, c.params, c.shape, c.median_ms, c.iqr_ms, {samples} "
                    f"FROM cases c JOIN runs r ON r.id = c.run_id WHERE {' AND '.join(where)} ORDER BY 4, 5, r.id",
                    tuple(params))
    df = pd.DataFrame(rows, columns=["run", "digest", "commit", "at", "run_time", "gpu", "key", "workload", "variant",
                                     "params", "shape", "median_ms", "iqr_ms", "samples"])
    if exclude_digests:
        df = df[~df["digest"].isin(exclude_digests)]
    if keys is not None:
        df = df[df["key"].isin(keys)]
    if cases:
        df = df[[any(matches(k, p) for p in cases) for k in df["key"]]]
    if df.empty:
        return df.assign(runs=[])
    out = []
    for (gpu_, key, commit), g in df.groupby(["gpu", "key", "commit"], sort=False):
        pooled = None
        if with_samples and g["samples"].notna().all():
            pooled = np.concatenate([np.asarray(json.loads(s), dtype=np.float64) for s in g["samples"]])
        first = g.iloc[0]
        out.append({"gpu": gpu_, "key": key, "commit": commit, "at": first["at"], "workload": first["workload"],
                    "variant": first["variant"], "params": first["params"], "shape": first["shape"],
                    "median_ms": float(np.median(g["median_ms"])), "iqr_ms": float(np.median(g["iqr_ms"].fillna(0))),
                    "runs": len(g), "run_medians": [float(x) for x in g["median_ms"]], "samples": pooled})
    # groupby(sort=False) keeps first appearance, which is history order within each case
    return pd.DataFrame(out)


def _float(v) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if np.isfinite(x) else None


def _int(v) -> int | None:
    x = _float(v)
    return int(x) if x is not None else None
