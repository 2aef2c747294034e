"""The history's schema, versioned: each migration is applied once, in order, in its own transaction, and
recorded in `schema_version`. A database whose version is newer than this nnbench knows is refused before
anything is read or written (an older nnbench must not write rows a newer schema does not expect).

Columns are portable between SQLite and PostgreSQL: TEXT, INTEGER, BIGINT, DOUBLE PRECISION (SQLite reads them
by affinity); {id} is the dialect's auto-increment key. Times are ISO 8601 UTC text, which sorts as time.
"""

from __future__ import annotations

import datetime as dt
import json

from nnbench import results
from nnbench.errors import NnbenchError
from nnbench.history.db import Database, foreign
from nnbench.version import __version__

MIGRATIONS: list[tuple[int, str, list[str]]] = [
    (1, "runs and their cases", [
        """CREATE TABLE runs (
            id {id},
            digest TEXT NOT NULL UNIQUE,      -- sha256 of the run's records: recording a file twice stores it once
            commit_sha TEXT NOT NULL,         -- the records' git_sha (with -dirty where the tree was)
            run_time TEXT NOT NULL,           -- when it was measured: the records' earliest timestamp
            recorded_at TEXT NOT NULL,
            gpu TEXT NOT NULL,
            host TEXT,
            source TEXT,                      -- the results file it came from
            nnbench_version TEXT)""",
        """CREATE TABLE cases (
            id {id},
            run_id BIGINT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            case_key TEXT NOT NULL,           -- results.case_key_of: workload|variant|params|shape|hot-or-cold
            suite TEXT, variant TEXT, params TEXT, shape TEXT, unit TEXT,
            status TEXT NOT NULL,
            median_ms DOUBLE PRECISION, iqr_ms DOUBLE PRECISION, min_ms DOUBLE PRECISION,
            mean_ms DOUBLE PRECISION, n_samples INTEGER,
            energy_j DOUBLE PRECISION,        -- per timed unit (launch or step), where the record has it
            power_w DOUBLE PRECISION,
            samples TEXT,                     -- the raw samples in ms, a JSON array, where the record has them
            record TEXT NOT NULL)             -- the whole record as JSON, as the results file had it""",
        "CREATE INDEX cases_by_key ON cases (case_key, run_id)",
        "CREATE INDEX runs_by_gpu ON runs (gpu, run_time)",
    ]),
    (2, "commit time: history is ordered by when a commit was made, not when it was measured", [
        "ALTER TABLE runs ADD COLUMN commit_time TEXT",  # git's committer date, where the recorder knew the commit
        "CREATE INDEX runs_by_commit ON runs (commit_sha)",
    ]),
    (3, "one word for a workload: cases.suite is cases.workload; each stored case keyed as today's records are", [
        "ALTER TABLE cases RENAME COLUMN suite TO workload",
        lambda db: rekey(db),
    ]),
]
LATEST = MIGRATIONS[-1][0]


def rekey(db: Database) -> None:
    """Each case's workload and key from its stored record as today's reader sees it (results.upgrade_row: the
    old family names mlp, conv-backward, pool, conv-model; parameters at their defaults dropped from the key), so a
    case recorded before the rename and one recorded after are one series."""
    changed = []
    for case_id, key, workload, record in db.query("SELECT id, case_key, workload, record FROM cases"):
        row = results.upgrade_row(json.loads(record))
        new = (results.case_key_of(row), row.get("workload"))
        if new != (key, workload):
            changed.append((*new, case_id))
    if changed:
        db.executemany("UPDATE cases SET case_key = ?, workload = ? WHERE id = ?", changed)
_LOCK_KEY = 0x6E6E6265  # "nnbe": PostgreSQL advisory lock id for migrations


def version(db: Database) -> int | None:
    """The schema version of `db`: None for an empty database. A database with tables but no
    schema_version is not a history database and is refused."""
    tables = db.tables()
    if "schema_version" not in tables:
        if tables:
            raise foreign(db.where, tables)
        return None
    found = db.query("SELECT max(version) FROM schema_version")[0][0]
    return int(found) if found is not None else 0


def ready(db: Database, upto: int = LATEST) -> int:
    """Bring `db` to schema version `upto` (applying what is missing), or refuse a newer one. Returns the version."""
    current = version(db)
    if current is not None and current > LATEST:
        raise NnbenchError(f"{db.where}: history schema version {current} is newer than this nnbench knows "
                           f"({LATEST}); upgrade nnbench (nothing was read or written)")
    if current is not None and current >= upto:
        return current
    with db.transaction():
        return migrate(db, upto)


def migrate(db: Database, upto: int = LATEST) -> int:
    """`ready`'s work, inside a transaction the caller holds: take the migration lock (PostgreSQL; SQLite's
    BEGIN IMMEDIATE already is one), read the version again (another process may have migrated while we
    waited), apply what is missing."""
    if db.dialect == "postgresql":
        db.execute("SELECT pg_advisory_xact_lock(?)", (_LOCK_KEY,))
    if "schema_version" not in db.tables():
        db.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL, "
                   "nnbench_version TEXT NOT NULL, what TEXT NOT NULL)")
    current = db.query("SELECT max(version) FROM schema_version")[0][0] or 0
    if current > LATEST:
        raise NnbenchError(f"{db.where}: history schema version {current} is newer than this nnbench knows "
                           f"({LATEST}); upgrade nnbench (nothing was read or written)")
    for number, what, statements in MIGRATIONS:
        if current < number <= upto:
            for statement in statements:  # SQL, or a step in Python over the rows
                statement(db) if callable(statement) else db.execute(db.ddl(statement))
            now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
            db.execute("INSERT INTO schema_version (version, applied_at, nnbench_version, what) "
                       "VALUES (?, ?, ?, ?)", (number, now, __version__, what))
            current = number
    return current
