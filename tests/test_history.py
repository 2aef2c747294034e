"""The history database (nnbench/history/): change points on synthetic histories, recording and reading runs,
migrations, bad databases, two writers at once, and `check --against-history`; on SQLite and, where a server is
reachable ($NNBENCH_TEST_POSTGRES; `bash .ci/run` starts one), on PostgreSQL.

Where NNBENCH_REQUIRE_HISTORY=1 (set by .ci/run), a missing server or a missing `history` extra fails these tests
instead of skipping them, so CI cannot pass without running them."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from nnbench.cli import cli
from nnbench.errors import NnbenchError

REQUIRED = os.environ.get("NNBENCH_REQUIRE_HISTORY") == "1"
PG_URL = os.environ.get("NNBENCH_TEST_POSTGRES", "")
ROOT = Path(__file__).resolve().parent.parent


def _need(module: str, extra: str = "history"):
    try:
        return __import__(module)
    except ImportError:
        why = f"{module} is not installed (pip install -e '.[{extra}]')"
        if REQUIRED:
            pytest.fail(why)
        pytest.skip(why)


@pytest.fixture(autouse=True)
def _history_extra():
    """matplotlib draws `history show`'s figures; change points need only numpy and scipy."""
    _need("matplotlib")


@pytest.fixture(autouse=True)
def _consoles():
    """`check --format json|markdown` points the CLI's stdout console at stderr and does not point it back; in one
    pytest process that would narrow every later test's tables (those of test_profiling among them)."""
    from nnbench.cli import app
    out = app.out
    yield
    app.out = out


from nnbench import verdict  # noqa: E402
from nnbench.history import changepoints, db, gate, migrations, source, store, synthetic, trend  # noqa: E402


@pytest.fixture(params=["sqlite", "postgresql"])
def target(request, tmp_path):
    """A fresh, empty history: a SQLite file, or a new database on the test server (dropped afterwards)."""
    if request.param == "sqlite":
        yield str(tmp_path / "history.sqlite")
        return
    psycopg = _need("psycopg")
    if not PG_URL:
        why = "no PostgreSQL server: set NNBENCH_TEST_POSTGRES=postgresql://… (bash .ci/run starts one)"
        if REQUIRED:
            pytest.fail(why)
        pytest.skip(why)
    try:
        admin = psycopg.connect(PG_URL, autocommit=True, connect_timeout=5)
    except psycopg.Error as e:
        if REQUIRED:
            pytest.fail(f"{PG_URL}: {e}")
        pytest.skip(f"PostgreSQL at {PG_URL} is not reachable: {e}")
    name = f"nnbench_t_{uuid.uuid4().hex[:12]}"
    admin.execute(f"CREATE DATABASE {name}")
    try:
        yield PG_URL.rsplit("/", 1)[0] + "/" + name
    finally:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.close()


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def one_line_error(res, *needles):
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("nnbench: error:"), res.output
    for n in needles:
        assert n in lines[0], lines[0]


def fill(target, runs) -> None:
    with db.connect(target) as d:
        migrations.ready(d)
        for r in runs:
            store.record(d, r)


def count_runs(target) -> int:
    with db.connect(target, create=False) as d:
        return int(d.query("SELECT count(*) FROM runs")[0][0])


# -- change points ---------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(10))
def test_one_planted_step_is_found_at_its_commit_and_a_flat_history_has_none(seed):
    """The issue's target: 100 commits, 1% noise, one 5% step at a commit that varies with the seed."""
    at = 20 + 6 * seed
    step = [r.cases[0].fields["median_ms"] for r in synthetic.history(100, {at: 0.05}, seed=seed)]
    flat = [r.cases[0].fields["median_ms"] for r in synthetic.history(100, {}, seed=100 + seed)]
    assert [c.index for c in changepoints.detect(step)] == [at]
    assert changepoints.detect(flat) == []


def test_change_point_through_the_database(target):
    """The same, recorded run by run and read back: the change point names the planted commit."""
    fill(target, synthetic.history(100, {63: 0.05}, seed=7, cases={"tiled": 0.25}))
    fill(target, synthetic.history(100, {}, seed=8, cases={"naive": 1.5}))
    with db.connect(target, create=False) as d:
        found = {t.variant: t for t in trend.trends(store.points(d))}
    tiled, naive = found["tiled"], found["naive"]
    assert [tiled.commits[c.index] for c in tiled.change_points] == [synthetic.commit(63)]
    assert 0.04 < tiled.change_points[0].change < 0.06
    assert tiled.stable_from == 63 and len(tiled.stable) == 37
    assert naive.change_points == [] and len(naive.stable) == 100


# -- recording -------------------------------------------------------------------------------------
def test_record_round_trip_and_a_run_is_stored_once(target, tmp_path):
    runs = synthetic.history(4, {}, samples=20, cases={"tiled": 0.25, "coarse": 0.1})
    runs[0].cases[0].fields.update(energy_j=0.0123, power_w=420.5)
    fill(target, runs)
    fill(target, runs[:2])  # again: nothing added
    assert count_runs(target) == 4
    with db.connect(target, create=False) as d:
        rows = d.query("SELECT c.samples, c.energy_j, c.power_w, c.record, r.commit_sha FROM cases c JOIN runs r ON "
                       "r.id = c.run_id WHERE c.variant = 'tiled' ORDER BY r.run_time")
        assert len(rows) == 4
        samples, energy, power, record, sha = rows[0]
        assert json.loads(samples) == runs[0].cases[0].samples_ms
        assert (energy, power, sha) == (0.0123, 420.5, synthetic.commit(0))
        assert json.loads(record)["median_ms"] == runs[0].cases[0].fields["median_ms"]
        pts = store.points(d, cases=("tiled",), with_samples=True)
        assert len(pts) == 4 and len(pts.iloc[0]["samples"]) == 20


def test_cli_record_and_show(target, tmp_path):
    runs = synthetic.history(12, {8: 0.10}, cases={"tiled": 0.25, "coarse": 0.1})
    files = []
    for i, r in enumerate(runs):
        synthetic.write(r, tmp_path / f"run{i:02d}.csv")
        files.append(tmp_path / f"run{i:02d}.csv")
    res = run("history", "record", *files, "--db", target)
    assert res.exit_code == 0, res.output
    assert res.output.count("recorded run") == 12
    res = run("history", "record", files[3], "--db", target)
    assert res.exit_code == 0 and "already recorded" in res.output, res.output
    res = run("history", "show", "--db", target, "--case", "tiled", "--png", tmp_path / "png")
    assert res.exit_code == 0, res.output
    assert "0008c0ffe" in res.output and "coarse" not in res.output.split("figures:")[0]
    pngs = list((tmp_path / "png").glob("*.png"))
    assert len(pngs) == 1 and pngs[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    one_line_error(run("history", "show", "--db", target, "--case", "nothing-like-this", "--no-png"),
                   "no verified cases matching nothing-like-this")


def test_cli_record_and_show_json(target, tmp_path):
    """`history record --json` lists each run as stored (new or not); `history show --json` each case's series
    and change points, the table's figures; both validate against the schema and are never written over."""
    jsonschema = _need("jsonschema", "test")
    from nnbench import rawresults
    runs = synthetic.history(12, {8: 0.10}, cases={"tiled": 0.25, "coarse": 0.1})
    files = [tmp_path / f"run{i:02d}.csv" for i in range(len(runs))]
    for r, path in zip(runs, files):
        synthetic.write(r, path)
    res = run("history", "record", *files[:11], "--db", target, "--json", tmp_path / "rec.jsonl")
    assert res.exit_code == 0, res.output
    res = run("history", "record", files[10], files[11], "--db", target, "--json", tmp_path / "rec2.jsonl")
    assert res.exit_code == 0, res.output

    def lines(path, kind):
        objs = [json.loads(x) for x in path.read_text().splitlines()]
        for obj in objs:
            jsonschema.validate(obj, rawresults.schema())
        assert objs[0]["kind"] == kind and objs[0]["schema_version"] == rawresults.SCHEMA_VERSION
        return objs[1:]
    first, again = lines(tmp_path / "rec.jsonl", "history-record"), lines(tmp_path / "rec2.jsonl", "history-record")
    assert [r["new"] for r in first] == [True] * 11 and [r["new"] for r in again] == [False, True]
    assert again[0]["run_id"] == first[10]["run_id"] and first[0]["commit"] == synthetic.commit(0)
    assert first[0]["cases"] == 2 and first[0]["source"].endswith("run00.csv")
    res = run("history", "show", "--db", target, "--no-png", "--json", tmp_path / "show.jsonl")
    assert res.exit_code == 0, res.output
    trends = {t["variant"]: t for t in lines(tmp_path / "show.jsonl", "history")}
    tiled = trends["tiled"]
    assert [p["commit"] for p in tiled["series"]] == [synthetic.commit(i) for i in range(12)]
    assert [c["commit"] for c in tiled["change_points"]] == [synthetic.commit(8)] == [tiled["stable_from"]]
    assert 0.08 < tiled["change_points"][0]["change"] < 0.12 and tiled["stable_commits"] == 4
    assert f"{tiled['stable_ms']:.4f}" in res.output and len(trends["coarse"]["series"]) == 12
    for cmd in (["history", "show", "--db", target, "--no-png"], ["history", "record", files[0], "--db", target]):
        one_line_error(run(*cmd, "--json", tmp_path / "show.jsonl"), "never overwrites")
    assert count_runs(target) == 12


def test_a_failed_write_stores_nothing(target, monkeypatch):
    """A run is written in one transaction: a failure after its row and before its cases leaves no trace."""
    fill(target, synthetic.history(2, {}))
    with db.connect(target) as d:
        def broken(*args, **kw):
            raise NnbenchError("simulated: the disk filled after the run's row was written")
        monkeypatch.setattr(d, "executemany", broken)
        with pytest.raises(NnbenchError):
            store.record(d, synthetic.history(3, {}, seed=5)[2])
        assert int(d.query("SELECT count(*) FROM runs")[0][0]) == 2  # the same connection goes on working
    assert count_runs(target) == 2


# -- migrations and bad databases ------------------------------------------------------------------
def test_migrates_an_old_database_and_keeps_its_runs(target):
    with db.connect(target) as d:
        assert migrations.ready(d, upto=1) == 1
        d.execute("INSERT INTO runs (digest, commit_sha, run_time, recorded_at, gpu) VALUES (?, ?, ?, ?, ?)",
                  ("d1", "abc", "2026-01-01T00:00:00+00:00", "2026-01-01T00:00:00+00:00", "gpu"))
    with db.connect(target, create=False) as d:
        assert migrations.version(d) == 1
        assert migrations.ready(d) == migrations.LATEST
        assert [r[0] for r in d.query("SELECT version FROM schema_version ORDER BY version")] == \
            list(range(1, migrations.LATEST + 1))
        assert d.query("SELECT commit_sha, commit_time FROM runs") == [("abc", None)]


def test_a_newer_schema_is_refused_and_left_alone(target, tmp_path):
    fill(target, synthetic.history(3, {}))
    with db.connect(target, create=False) as d:
        d.execute("INSERT INTO schema_version (version, applied_at, nnbench_version, what) VALUES (?, ?, ?, ?)",
                  (migrations.LATEST + 7, "2030-01-01", "9.0", "from the future"))
    synthetic.write(synthetic.history(5, {}, seed=3)[4], tmp_path / "new.csv")
    one_line_error(run("history", "record", tmp_path / "new.csv", "--db", target),
                   f"schema version {migrations.LATEST + 7} is newer", "upgrade nnbench")
    one_line_error(run("history", "show", "--db", target), "newer")
    one_line_error(run("check", "--against-history", tmp_path / "new.csv", "--db", target), "newer")
    assert count_runs(target) == 3


def test_a_corrupt_or_foreign_sqlite_file_is_refused_untouched(tmp_path):
    synthetic.write(synthetic.history(1, {})[0], tmp_path / "run.csv")
    corrupt = tmp_path / "corrupt.sqlite"
    corrupt.write_bytes(b"this is not a database, but someone's notes\n" * 100)
    before = corrupt.read_bytes()
    one_line_error(run("history", "record", tmp_path / "run.csv", "--db", corrupt), str(corrupt),
                   "not a readable SQLite history database", "nothing was written")
    assert corrupt.read_bytes() == before
    foreign = tmp_path / "foreign.sqlite"
    with sqlite3.connect(foreign) as c:
        c.execute("CREATE TABLE invoices (id INTEGER)")
    c.close()
    before = foreign.read_bytes()  # in rollback-journal mode: a switch to WAL would change its header
    one_line_error(run("history", "record", tmp_path / "run.csv", "--db", foreign), "not an nnbench history database",
                   "invoices")
    assert foreign.read_bytes() == before and not (tmp_path / "foreign.sqlite-wal").exists()
    with sqlite3.connect(foreign) as c:
        assert [r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'")] == ["invoices"]
    one_line_error(run("history", "show", "--db", tmp_path / "absent.sqlite"), "no history database here")
    assert not (tmp_path / "absent.sqlite").exists()


def test_an_unreachable_server_is_one_line(tmp_path):
    _need("psycopg")
    synthetic.write(synthetic.history(1, {})[0], tmp_path / "run.csv")
    # port 1 on loopback: nothing listens there, the connection is refused at once
    one_line_error(run("history", "record", tmp_path / "run.csv", "--db", "postgresql://nnbench:secret@127.0.0.1:1/h"),
                   "postgresql://nnbench:***@127.0.0.1:1/h", "cannot reach the PostgreSQL server")
    one_line_error(run("history", "record", tmp_path / "run.csv", "--db", "mysql://x/y"), "postgresql:// URL")


# -- two writers at once ---------------------------------------------------------------------------
def test_two_recorders_at_once_store_every_run_once(target, tmp_path):
    """Two processes record 10 runs each into one history at the same moment, both also recording one shared
    file: all 21 runs are stored, none twice, and neither process fails."""
    runs = synthetic.history(21, {}, cases={"tiled": 0.25, "coarse": 0.1, "naive": 1.2}, samples=200)
    files = []
    for i, r in enumerate(runs):
        synthetic.write(r, tmp_path / f"run{i:02d}.csv")
        files.append(str(tmp_path / f"run{i:02d}.csv"))
    fill(target, [])  # the schema exists, so both processes meet the same database
    shared = files[20]
    procs = [subprocess.Popen([sys.executable, "-m", "nnbench", "history", "record", *part, shared, "--db", target],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for part in (files[0:20:2], files[1:20:2])]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert count_runs(target) == 21
    with db.connect(target, create=False) as d:
        assert d.query("SELECT count(*) FROM cases")[0][0] == 21 * 3
    assert sum(o.count("recorded run") for o in outs) == 21 and sum(o.count("already recorded") for o in outs) == 1


def test_a_recorder_waits_for_another_writers_transaction(target, tmp_path):
    """A writer holds a transaction in which it has just stored a run; another process records the same run
    meanwhile. It must wait (SQLite: the busy timeout; PostgreSQL: the digest's unique index), not fail, and then
    find the run stored: exactly one copy."""
    import time
    fill(target, [])
    run_ = synthetic.history(1, {}, samples=50)[0]
    synthetic.write(run_, tmp_path / "r.csv")
    same = source.read(tmp_path / "r.csv")[0]
    with db.connect(target) as holder:
        with holder.transaction():
            store.write(holder, same)
            proc = subprocess.Popen([sys.executable, "-m", "nnbench", "history", "record", tmp_path / "r.csv", "--db",
                                     target], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            time.sleep(4)  # long enough for the recorder to start and reach the database
            assert proc.poll() is None, proc.communicate()[0]  # it is waiting for us, not failed or done
    out = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0 and "already recorded" in out, out
    assert count_runs(target) == 1


def test_a_migration_waits_for_another(target):
    """One process is creating the schema of a fresh database (its transaction still open); another opens the same
    database meanwhile. It must wait for the first (PostgreSQL: the advisory lock; SQLite: BEGIN IMMEDIATE), then
    find the schema made, not create it a second time."""
    import time
    code = ("import sys; from nnbench.history import db, migrations; d = db.connect(sys.argv[1]); "
            "print('version', migrations.ready(d))")
    with db.connect(target) as holder:
        with holder.transaction():
            migrations.migrate(holder)
            proc = subprocess.Popen([sys.executable, "-c", code, target], cwd=ROOT, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True)
            time.sleep(4)
            assert proc.poll() is None, proc.communicate()[0]
    out = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0 and f"version {migrations.LATEST}" in out, out
    with db.connect(target, create=False) as d:
        assert [r[0] for r in d.query("SELECT version FROM schema_version ORDER BY version")] == \
            list(range(1, migrations.LATEST + 1))


def test_two_processes_migrating_a_fresh_database_at_once(target):
    code = ("import sys; from nnbench.history import db, migrations; d = db.connect(sys.argv[1]); "
            "print(migrations.ready(d))")
    procs = [subprocess.Popen([sys.executable, "-c", code, target], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    with db.connect(target, create=False) as d:
        assert [r[0] for r in d.query("SELECT version FROM schema_version ORDER BY version")] == \
            list(range(1, migrations.LATEST + 1))


# -- check --against-history -----------------------------------------------------------------------
def _current(tmp_path, name, change, seed=99, samples=0):
    """A run at the next commit whose cases sit `change` above the level of their history's start."""
    run_ = synthetic.history(1, {0: change}, seed=seed, cases={"tiled": 0.25}, samples=samples)[0]
    for c in run_.cases:
        c.fields.update(git_sha="f" * 40, timestamp="2027-01-01T00:00:00+00:00")
    synthetic.write(run_, tmp_path / name)
    return tmp_path / name


def test_check_against_history_uses_the_last_stable_segment(target, tmp_path):
    """History: 30 commits at 0.25 ms, then a planted +10% step at commit 30 (an accepted change), 10 commits at
    the new level. A run at the new level is SAME against the last stable segment, though it is 10% above
    the history as a whole; a run 10% above the new level is SLOWER (exit 1); 10% below, FASTER."""
    fill(target, synthetic.history(40, {30: 0.10}, seed=11, cases={"tiled": 0.25}))
    same = run("check", "--against-history", _current(tmp_path, "same.csv", 0.10), "--db", target, "--all")
    assert same.exit_code == 0 and "SAME" in same.output, same.output
    slower = run("check", "--against-history", _current(tmp_path, "slower.csv", 0.21), "--db", target)
    assert slower.exit_code == 1 and "SLOWER" in slower.output, slower.output
    faster = run("check", "--against-history", _current(tmp_path, "faster.csv", -0.01), "--db", target)
    assert faster.exit_code == 0 and "FASTER" in faster.output, faster.output


def test_check_against_history_needs_enough_stable_history(target, tmp_path):
    """Two commits after the last change point are too few to judge: NEW (passes), saying why."""
    fill(target, synthetic.history(32, {30: 0.30}, seed=12, cases={"tiled": 0.25}))
    res = run("check", "--against-history", _current(tmp_path, "cur.csv", 0.60), "--db", target)
    assert res.exit_code == 0 and "NEW" in res.output and "2 runs of history" in res.output, res.output


def test_check_against_history_baseline_pools_samples():
    """Where every run of the segment has raw samples, the baseline row carries them all (for the rank test)."""
    import pandas as pd
    runs = synthetic.history(6, {}, samples=30, cases={"tiled": 0.25})
    pts = pd.DataFrame([{"gpu": r.gpu, "key": r.cases[0].key, "commit": r.commit_sha, "at": r.run_time,
                         "workload": "gemm", "variant": "tiled", "params": "TS=32", "shape": "s",
                         "median_ms": r.cases[0].fields["median_ms"], "iqr_ms": 0.001, "runs": 1,
                         "run_medians": [r.cases[0].fields["median_ms"]],
                         "samples": __import__("numpy").asarray(r.cases[0].samples_ms)} for r in runs])
    cur = pd.DataFrame([dict(runs[0].cases[0].fields)], index=[runs[0].cases[0].key])
    base, short = gate.baseline(trend.trends(pts), cur)
    assert short == {} and len(base.iloc[0]["samples_ms"]) == 6 * 30
    medians = [r.cases[0].fields["median_ms"] for r in runs]
    measured = __import__("numpy").std(medians, ddof=1) / (sum(medians) / 6)
    # six runs are too few to trust their spread (verdict.MIN_SPREAD_RUNS): at least UNKNOWN_RUN_SPREAD
    assert base.iloc[0]["run_spread"] == pytest.approx(max(measured, verdict.UNKNOWN_RUN_SPREAD))
    assert verdict.run_spread_of(medians * 2) == pytest.approx(__import__("numpy").std(medians * 2, ddof=1) /
                                                               (sum(medians) / 6))


def test_check_against_history_options(tmp_path):
    one_line_error(run("check", "--db", "x.sqlite", "a.csv", "b.csv"), "--db applies only with --against-history")
    one_line_error(run("check", "--against-history", "a.csv", "b.csv"), "needs one CURRENT.csv")


def test_source_reads_a_resumed_file_as_one_run_per_commit(tmp_path):
    runs = synthetic.history(2, {}, cases={"tiled": 0.25})
    path = tmp_path / "two.csv"
    from nnbench import results
    sink = results.CsvSink(path)
    for r in runs:
        for c in r.cases:
            sink.append(c.fields)
    sink.close()
    got = source.read(path)
    assert [r.commit_sha for r in got] == [synthetic.commit(0), synthetic.commit(1)]
    # the same commit's runs told apart by their sweep label (a file of repeated runs): one run each
    labelled = tmp_path / "labelled.csv"
    sink = results.CsvSink(labelled)
    for label in ("run-0", "run-1", "run-2"):
        for c in runs[0].cases:
            sink.append(dict(c.fields, sweep=label))
    sink.close()
    assert len(source.read(labelled)) == 3


def test_check_against_history_on_raw_samples(target, tmp_path):
    """Runs recorded from --json files keep their raw samples; the gate then pools the segment's samples and the
    rank test decides (method "rank"): +10% is SLOWER, the same level SAME, in every output format."""
    runs = synthetic.history(8, {}, seed=13, samples=40, cases={"tiled": 0.25})
    files = []
    for i, r in enumerate(runs):
        synthetic.write(r, tmp_path / f"run{i}.json")
        files.append(tmp_path / f"run{i}.json")
    assert run("history", "record", *files, "--db", target).exit_code == 0
    with db.connect(target, create=False) as d:
        assert len(json.loads(d.query("SELECT samples FROM cases")[0][0])) == 40
    slower = _current(tmp_path, "slower.json", 0.10, samples=40)
    res = run("check", "--against-history", slower, "--db", target, "--format", "json")
    assert res.exit_code == 1, res.output
    got = json.loads(res.stdout)
    case = next(c for c in got["cases"] if c["verdict"] == "SLOWER")
    assert case["method"] == "rank" and case["base_samples"] == 8 * 40 and case["cur_samples"] == 40, case
    same = _current(tmp_path, "same.json", 0.0, samples=40)
    res = run("check", "--against-history", same, "--db", target, "--format", "markdown")
    assert res.exit_code == 0 and "passed" in res.stdout, res.output


def test_check_against_history_allows_for_the_spread_between_runs(target, tmp_path):
    """A case whose history moves 6% from run to run (its samples spread only 0.5% inside each run): a run 10%
    above its median is not SLOWER, because the segment's between-run spread (passed to the rank test as
    run_spread) raises its tolerance; the same run against a steady history is SLOWER."""
    for name, noise in (("noisy", 0.06), ("steady", 0.005)):
        db_ = target if name == "noisy" else str(tmp_path / "steady.sqlite")
        runs = synthetic.history(12, {}, noise=noise, seed=21, samples=40, cases={"tiled": 0.25})
        files = []
        for i, r in enumerate(runs):
            synthetic.write(r, tmp_path / f"{name}{i}.json")
            files.append(tmp_path / f"{name}{i}.json")
        assert run("history", "record", *files, "--db", db_).exit_code == 0
        res = run("check", "--against-history", _current(tmp_path, f"{name}-cur.json", 0.10, samples=40), "--db", db_,
                  "--format", "json")
        verdicts = [c["verdict"] for c in json.loads(res.stdout)["cases"]]
        assert verdicts == (["SAME"] if name == "noisy" else ["SLOWER"]), (name, res.output)


def test_the_history_gate_defaults_catch_3_percent_where_two_files_do_not(target, tmp_path):
    """The gate's defaults (verdict.py, lab/journal/measurement.md): against a steady history of 12 runs (0.2%
    between runs) a run 3.5% slower is SLOWER at the default 2% floor, while the same two runs compared as two
    files are SAME at the default 5%; a history of 6 runs is too short to trust its spread, so it counts as 1%
    and the tolerance is the two-file 5%."""
    for n, expect in ((12, "SLOWER"), (6, "SAME")):
        db_ = target if n == 12 else str(tmp_path / "short.sqlite")
        runs = synthetic.history(n, {}, noise=0.002, seed=31, samples=40, cases={"tiled": 0.25})
        files = [tmp_path / f"h{n}-{i}.json" for i in range(n)]
        for r, path in zip(runs, files):
            synthetic.write(r, path)
        assert run("history", "record", *files, "--db", db_).exit_code == 0
        cur = _current(tmp_path, f"cur{n}.json", 0.035, samples=40)
        res = run("check", "--against-history", cur, "--db", db_, "--format", "json")
        got = json.loads(res.stdout)
        assert [c["verdict"] for c in got["cases"]] == [expect] and got["tolerance"] == 0.02, (n, res.output)
    two = run("check", files[0], cur, "--format", "json")
    assert [c["verdict"] for c in json.loads(two.stdout)["cases"]] == ["SAME"], two.output
    assert json.loads(two.stdout)["tolerance"] == 0.05


def test_two_cases_that_share_a_long_start_get_two_figure_files():
    """Session 7's history PNGs: step 9's rows carry long parameters, and a name cut at 150 characters lost their
    shape. Two cases alike in their first 150 characters must not share a file (one figure would replace the
    other); a short name stays as it was."""
    import pandas as pd

    from nnbench.history.figures import file_name
    from nnbench.history.trend import Trend

    params = "BM=128 BN=128 BK=32 STAGES=4 ADAPT=1 CLUSTER_M=1 PERSISTENT=0 SPLIT_K=0 PRECISION=1 · BN=64 here " \
             "(B by cp.async, few tiles), TMA, cp.async B"

    def trend(shape, p=params):
        return Trend("NVIDIA H100 80GB HBM3", f"gemm|tf32_wgmma|{p}|{shape}|hot", "gemm", "tf32_wgmma", p, shape,
                     pd.DataFrame())

    a, b = file_name(trend("1000×777×1234")), file_name(trend("1000×777×1235"))
    assert a != b and len(a) == len(b) and a.startswith("nvidia-h100-80gb-hbm3--gemm-tf32-wgmma-bm-128")
    assert file_name(trend("64×64×64", "TS=32")) == "nvidia-h100-80gb-hbm3--gemm-tf32-wgmma-ts-32-64-64-64-hot.png"



def test_reading_a_run_is_linear_in_its_cases(tmp_path, monkeypatch):
    """8,000 cases took 55 s: each record rebuilt the run's list of cases. Counted, not timed: the case
    key is computed a fixed number of times per record, however many records the run has."""
    import pandas as pd

    from nnbench import results
    from nnbench.history import source
    row = pd.read_csv("docs/data/figures/ci_again.csv").iloc[[0]]
    calls = {"n": 0}
    real = results.case_key_of

    def counted(fields):
        calls["n"] += 1
        return real(fields)
    monkeypatch.setattr(results, "case_key_of", counted)
    per_case = []
    for n in (500, 2000):
        df = pd.concat([row] * n, ignore_index=True)
        df["variant"] = [f"v{i}" for i in range(n)]
        df.to_csv(tmp_path / f"{n}.csv", index=False)
        calls["n"] = 0
        (run,) = source.read(tmp_path / f"{n}.csv")
        assert len(run.cases) == n
        per_case.append(calls["n"] / n)
    assert per_case[1] <= per_case[0] * 1.1 and per_case[1] < 5, per_case


def test_an_open_that_sqlite_answers_busy_at_once_is_tried_again():
    """SQLite answers busy without waiting where waiting could deadlock (a fresh file switched to WAL while another
    process opens it); the open tries again until the busy timeout, and any other error passes through at once."""
    import sqlite3
    calls = []

    def busy_twice():
        calls.append(1)
        if len(calls) < 3:
            raise sqlite3.OperationalError("database is locked")
        return "open"

    assert db.retry_while_busy(busy_twice) == "open" and len(calls) == 3
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        db.retry_while_busy(lambda: (_ for _ in ()).throw(sqlite3.OperationalError("database is locked")), 0.05)
    other = []
    with pytest.raises(sqlite3.DatabaseError, match="malformed"):
        db.retry_while_busy(lambda: other.append(1) or (_ for _ in ()).throw(sqlite3.DatabaseError("malformed")))
    assert other == [1]


def test_a_version_2_history_is_renamed_and_rekeyed_into_one_series_with_new_runs(target):
    """Migration 3: a case stored under the old family word (suite 'mlp', its key built from it, a default parameter
    in the key) becomes today's workload and key, so a run recorded after the rename continues its series."""
    import json

    from nnbench import results, workloads
    v = next(v for v in workloads.all_variants() if v.workload == "train" and v.kind == "mini-batch" and v.params)
    params = " ".join(f"{k}={x}" for k, x in v.defaults().items())
    old = {"suite": "mlp", "variant": v.name, "step": "3", "params": params, "shape": "Net 8, B=4096", "cold": False,
           "status": "PASS", "median_ms": 1.25, "git_sha": "a" * 40, "timestamp": "2026-11-01T00:00:00+00:00"}
    old_key = f"mlp|{v.name}|{params}|Net 8, B=4096|hot"
    with db.connect(target) as d:
        migrations.ready(d, upto=2)
        with d.transaction():
            d.execute("INSERT INTO runs (digest, commit_sha, run_time, recorded_at, gpu) VALUES "
                      "('x', 'aaaa', '2026-11-01T00:00:00+00:00', '2026-11-01T00:00:00+00:00', 'H100')")
            run_id = d.query("SELECT id FROM runs")[0][0]
            d.execute("INSERT INTO cases (run_id, case_key, suite, variant, params, shape, status, median_ms, record) "
                      "VALUES (?, ?, 'mlp', ?, ?, 'Net 8, B=4096', 'PASS', 1.25, ?)",
                      (run_id, old_key, v.name, params, json.dumps(old)))
        assert migrations.ready(d) == migrations.LATEST
        (key, workload), = d.query("SELECT case_key, workload FROM cases")
    today = results.case_key_of(results.upgrade_row(old))
    assert (key, workload) == (today, "train") and today == f"train|{v.name}||Net 8, B=4096|hot"
