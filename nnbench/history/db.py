"""Where the history lives: a SQLite file (embedded, the default) or a PostgreSQL server (`--db postgresql://…`,
for a fleet of runners writing into one history).

One DB-API seam with a thin dialect layer: SQL is written once with `?` placeholders and portable types; the
dialect swaps the placeholder and the auto-increment key. Writes happen in one transaction each, so a run is
stored whole or not at all:
- SQLite: WAL (readers never block the writer), `BEGIN IMMEDIATE` (a writer takes the lock before it reads what
  it will add to, so two recorders serialise instead of deadlocking) and a busy timeout (the second one waits).
- PostgreSQL: a transaction per write; the schema migration also takes an advisory lock, so two runners that
  meet a fresh database create it once.
Every way a database can fail to open or write (a corrupt file, an unreachable server, a lock held too long) is
one NnbenchError naming the database; nothing already stored is touched by a failed write.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from nnbench import paths
from nnbench.errors import NnbenchError

ENV = "NNBENCH_HISTORY_DB"  # the default database for every `history` command and `check --against-history`
BUSY_TIMEOUT_S = 30  # how long a writer waits for another writer's transaction (a run is a few thousand rows)
CONNECT_TIMEOUT_S = 5


def default_target() -> str:
    """$NNBENCH_HISTORY_DB, else results/history.sqlite."""
    return os.environ.get(ENV) or str(paths.RESULTS / "history.sqlite")


def is_postgres(target: str) -> bool:
    return target.startswith(("postgresql://", "postgres://"))


def redact(url: str) -> str:
    """The URL with its password replaced, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


class Database:
    """One open connection and its dialect. `execute`/`query` take SQL with `?` placeholders."""

    dialect = ""

    def __init__(self, where: str) -> None:
        self.where = where  # the path or the redacted URL, for messages
        self.conn = None

    # -- dialect ---------------------------------------------------------------------------------
    def sql(self, text: str) -> str:
        return text

    def ddl(self, text: str) -> str:
        """Portable DDL: {id} is the auto-increment primary key."""
        return text.format(id=self.ID)

    # -- use -------------------------------------------------------------------------------------
    def execute(self, text: str, params: tuple = ()):
        with self.errors():
            return self.conn.execute(self.sql(text), self.args(params))

    def query(self, text: str, params: tuple = ()) -> list[tuple]:
        with self.errors():
            return list(self.conn.execute(self.sql(text), self.args(params)).fetchall())

    def insert(self, text: str, params: tuple) -> int:
        """An INSERT whose new row's id is returned (`RETURNING id`: SQLite >= 3.35 and PostgreSQL)."""
        with self.errors():
            return int(self.conn.execute(self.sql(text + " RETURNING id"), self.args(params)).fetchone()[0])

    def executemany(self, text: str, rows: list[tuple]) -> None:
        with self.errors():
            self.conn.cursor().executemany(self.sql(text), rows)

    def args(self, params: tuple):
        return params

    def tables(self) -> set[str]:
        raise NotImplementedError

    @contextmanager
    def transaction(self) -> Iterator[None]:
        raise NotImplementedError

    @contextmanager
    def errors(self, doing: str = "") -> Iterator[None]:
        raise NotImplementedError

    def close(self) -> None:
        if self.conn is not None:
            conn, self.conn = self.conn, None
            try:
                conn.close()
            except Exception:  # closing after a failure must not hide the failure
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def is_busy(e: sqlite3.Error) -> bool:
    return isinstance(e, sqlite3.OperationalError) and ("locked" in str(e) or "busy" in str(e))


def retry_while_busy(step, timeout_s: float = BUSY_TIMEOUT_S):
    """Run `step` again while SQLite answers busy, for at most `timeout_s`. SQLite returns busy at once, without
    its busy handler, where waiting could deadlock: two processes opening a fresh file while one of them switches
    it to WAL (1 of 150 three-process opens here). Each statement of `step` may be run again."""
    deadline, pause = time.monotonic() + timeout_s, 0.005
    while True:
        try:
            return step()
        except sqlite3.Error as e:
            if not is_busy(e) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(2 * pause, 0.25)


class SqliteDatabase(Database):
    dialect = "sqlite"
    ID = "INTEGER PRIMARY KEY"

    def __init__(self, path: Path, create: bool) -> None:
        super().__init__(str(path))
        if not path.exists():
            if not create:
                raise NnbenchError(f"{path}: no history database here; make one with: nnbench history record "
                                   f"RESULTS.csv --db {path}")
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise NnbenchError(f"{path.parent}: cannot create the folder: {e.strerror or e}") from None
        elif path.is_dir():
            raise NnbenchError(f"{path}: is a folder, not a history database")
        with self.errors("cannot open"):
            # isolation_level=None: no implicit transactions; `transaction` says where each one starts and ends.
            self.conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            retry_while_busy(self._open)

    def _open(self) -> None:
        # A corrupt or foreign file fails here, on its first read, before anything is written to it.
        tables = {r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        # Another application's database is refused before WAL mode (a change to the file) is switched on.
        if tables and "schema_version" not in tables:
            self.close()
            raise foreign(self.where, tables)
        self.conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_S * 1000}")
        if self.conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA foreign_keys = ON")

    def tables(self) -> set[str]:
        return {r[0] for r in self.query("SELECT name FROM sqlite_master WHERE type = 'table'")}

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            with self.errors():
                self.conn.execute("ROLLBACK")
            raise
        self.execute("COMMIT")

    @contextmanager
    def errors(self, doing: str = "") -> Iterator[None]:
        try:
            yield
        except sqlite3.DatabaseError as e:
            text = str(e)
            if "locked" in text or "busy" in text:
                why = f"another writer held it for more than {BUSY_TIMEOUT_S} s"
            elif "not a database" in text or "malformed" in text:
                why = "not a readable SQLite history database (corrupt, or another kind of file)"
            else:
                why = text
            raise NnbenchError(f"{self.where}: {doing + ': ' if doing else ''}{why}; nothing was written to it") \
                from None


class PostgresDatabase(Database):
    dialect = "postgresql"
    ID = "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"

    def __init__(self, url: str) -> None:
        super().__init__(redact(url))
        try:
            import psycopg
        except ImportError:
            raise NnbenchError(f"--db {self.where}: PostgreSQL needs psycopg; install it with: "
                               "pip install -e '.[history]'") from None
        self._psycopg = psycopg
        try:
            # autocommit: no implicit transaction; `transaction` opens each one explicitly.
            self.conn = psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
        except psycopg.Error as e:
            raise NnbenchError(f"{self.where}: cannot reach the PostgreSQL server ({_first_line(e)}); nothing was "
                               "written") from None

    def sql(self, text: str) -> str:
        return text.replace("?", "%s")

    def args(self, params: tuple):
        return params or None  # None: psycopg leaves a statement without parameters unparsed

    def tables(self) -> set[str]:
        return {r[0] for r in self.query("SELECT table_name FROM information_schema.tables WHERE table_schema = "
                                         "current_schema()")}

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self.errors():
            with self.conn.transaction():
                yield

    @contextmanager
    def errors(self, doing: str = "") -> Iterator[None]:
        try:
            yield
        except self._psycopg.OperationalError as e:
            raise NnbenchError(f"{self.where}: lost the PostgreSQL server ({_first_line(e)}); the transaction was "
                               "rolled back, nothing was written") from None
        except self._psycopg.Error as e:
            raise NnbenchError(f"{self.where}: {doing + ': ' if doing else ''}{_first_line(e)}; the transaction "
                               "was rolled back, nothing was written") from None


def foreign(where: str, tables: set[str]) -> NnbenchError:
    """A database with tables but no schema_version: another application's, never written to."""
    return NnbenchError(f"{where}: not an nnbench history database (it has tables {', '.join(sorted(tables)[:5])} "
                        "but no schema_version); nothing was written to it")


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def connect(target: str | Path | None = None, create: bool = True) -> Database:
    """Open (and, with `create`, make) the history database at `target`: a path or postgresql:// URL;
    None means `default_target()`. The schema is not touched here: `migrations.ready` does that."""
    target = default_target() if target is None else str(target)
    if not target.strip():  # an empty --db (an unset variable in a CI script) must not mean the default history
        raise NnbenchError("--db '': name the history, a SQLite file or a postgresql:// URL (or leave --db out "
                           "for $NNBENCH_HISTORY_DB, else results/history.sqlite)")
    if is_postgres(target):
        return PostgresDatabase(target)
    if "://" in target:
        raise NnbenchError(f"--db {target}: give a file path (SQLite) or a postgresql:// URL")
    return SqliteDatabase(Path(target), create)
