"""Search strategies, budgets, replay and several workers, all on the CPU: the committed H100 results
(docs/data/figures/gemm_sweep_h100.csv) answer every case of configs/gemm_sweep.yaml, so every strategy
runs through the real sweep (plan, device limits, worker processes, records, resume) with no GPU."""

import csv
import subprocess
import sys
from dataclasses import replace

import pytest

from nnbench import paths, results
from nnbench.errors import NnbenchError
from nnbench.sweeps import config, replay, strategies, sweep
from nnbench.yamlnodes import ConfigError

from .conftest import mpirun_cmd, needs_mpi

CONFIG = paths.ROOT / "configs/gemm_sweep.yaml"
H100 = paths.ROOT / "docs/data/figures/gemm_sweep_h100.csv"


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def spec():
    return config.load_sweep(CONFIG)


@pytest.fixture(scope="module")
def truth(spec):
    return replay.load(H100, "gemm")


def test_committed_results_hold_the_configs_space(spec, truth):
    """Every case of the shipped config at every shape is in the committed file (pre-contract schema)."""
    replay.check_space(spec, truth, H100)
    timed = [k for k, r in truth.items() if r["status"] == "PASS" and k[0] != "cublas"]
    assert len(timed) == 436 and all(truth[k]["median_ms"] > 0 for k in timed)


def test_a_config_the_file_does_not_hold_is_refused(tmp_path, spec):
    text = CONFIG.read_text().replace("[2048, 2048, 2048]", "[1024, 1024, 1024]")
    other = tmp_path / "other.yaml"
    other.write_text(text)
    with pytest.raises(NnbenchError, match="cases of .* are not in the file, e.g. .* at 1024×1024×1024"):
        sweep.execute(config.load_sweep(other), sweep.RunOptions(out=tmp_path / "r.csv", replay=H100))


def test_brute_force_replay_returns_every_row_as_measured(tmp_path, spec, truth):
    outcome = sweep.execute(spec, sweep.RunOptions(out=tmp_path / "r.csv", replay=H100))
    got = rows(tmp_path / "r.csv")
    assert len(got) == 482 and outcome.jobs == 438 and outcome.skipped == 44
    for r in got:
        want = truth[(r["variant"], replay._params(results.parse_row(r)), r["shape"])]
        assert r["status"] == want["status"]
        if r["status"] == "PASS":
            assert float(r["median_ms"]) == want["median_ms"]
    assert all(r["gpu"].startswith("replay of NVIDIA H100") for r in got)


@pytest.mark.parametrize("name", ["random", "tpe", "tpe_halving"])
def test_a_strategy_evaluates_its_budget_once_each(tmp_path, spec, truth, name):
    run = replace(spec, strategy=name, budget=strategies.Budget(cases=12), vendor=False)
    outcome = sweep.execute(run, sweep.RunOptions(out=tmp_path / "r.csv", replay=H100))
    got = [r for r in rows(tmp_path / "r.csv") if r["status"] != "SKIP"]
    assert [f["evaluated"] for f in outcome.searches] == [12, 12]
    assert len(got) == 24 and len({results.case_key_of(r) for r in got}) == 24
    for found in outcome.searches:
        mine = [float(r["median_ms"]) for r in got if r["shape"] == found["shape"] and r["status"] == "PASS"]
        assert found["best_ms"] == min(mine)
    # the baseline runs first at each shape, so every later row carries its speedup
    firsts = [r for r in got if r["variant"] == "tiled" and r["params"] == "TS=32"]
    assert len(firsts) == 2 and all(r["speedup"] for r in got)


def test_a_resumed_random_search_continues_its_sequence(tmp_path, spec):
    """Stop after 7 cases a shape, resume with a budget of 15: the same 15 cases as one run of 15."""
    out, whole = tmp_path / "r.csv", tmp_path / "whole.csv"
    run = replace(spec, strategy="random", vendor=False)
    sweep.execute(replace(run, budget=strategies.Budget(cases=7)), sweep.RunOptions(out=out, replay=H100))
    again = sweep.execute(replace(run, budget=strategies.Budget(cases=15)),
                          sweep.RunOptions(out=out, replay=H100))
    assert [f["resumed"] for f in again.searches] == [7, 7]
    sweep.execute(replace(run, budget=strategies.Budget(cases=15)), sweep.RunOptions(out=whole, replay=H100))
    assert sorted(results.case_key_of(r) for r in rows(out)) == sorted(results.case_key_of(r) for r in rows(whole))


@pytest.mark.parametrize("name", ["tpe", "tpe_halving"])
def test_a_resumed_tpe_search_counts_what_is_done(tmp_path, spec, name):
    out = tmp_path / "r.csv"
    run = replace(spec, strategy=name, vendor=False)
    sweep.execute(replace(run, budget=strategies.Budget(cases=6)), sweep.RunOptions(out=out, replay=H100))
    again = sweep.execute(replace(run, budget=strategies.Budget(cases=14)),
                          sweep.RunOptions(out=out, replay=H100))
    assert [f["evaluated"] for f in again.searches] == [14, 14] and again.jobs == 16
    keys = [results.case_key_of(r) for r in rows(out) if r["status"] != "SKIP"]
    assert len(keys) == 28 and len(set(keys)) == 28


def test_tpe_learns_on_a_smooth_space():
    """On a bowl over two axes of one variant (9 x 9 points), TPE's best of 25 beats random's median
    over seeds: the model is used, not only its random start."""
    cands = [(a, b) for a in range(9) for b in range(9)]

    def f(c):
        return (c[0] - 6) ** 2 + (c[1] - 2) ** 2 + 1.0

    def best(name, seed):
        s = strategies.make(name, cands, seed, coords=lambda c: ("v", {"A": c[0], "B": c[1]}))
        while s.evaluated < 25:
            for i in s.ask(min(4, 25 - s.evaluated - len(s.pending))):
                s.tell(i, f(cands[i]))
        return s.best()[1]

    tpe = sorted(best("tpe", seed) for seed in range(5))
    rnd = sorted(best("random", seed) for seed in range(5))
    assert tpe[2] < rnd[2] or tpe[2] == 1.0, (tpe, rnd)


def test_tpe_halving_commits_to_the_variant_with_the_best_case():
    """Six variants of 36 points each, offset from one another, with a bowl inside each: after the
    halving rounds (6, 3, 2, 1 arms; 8 cases each of a 32-case budget) the fastest variant has half
    the budget, the slowest three only their first-round case, and the best found is within one step
    of the bowl's bottom of the fastest variant, for every seed."""
    cands = [(v, a, b) for v in range(6) for a in range(6) for b in range(6)]

    def f(c):
        return 1.0 + 0.25 * c[0] + 0.01 * ((c[1] - 4) ** 2 + (c[2] - 1) ** 2)

    for seed in range(4):
        s = strategies.make("tpe_halving", cands, seed, coords=lambda c: (f"v{c[0]}", {"A": c[1], "B": c[2]}),
                            budget_cases=32)
        while s.evaluated < 32:
            batch = s.ask(min(4, 32 - s.evaluated - len(s.pending)))
            assert batch
            for i in batch:
                s.tell(i, f(cands[i]))
        per_arm = [sum(cands[i][0] == v for i in s.results) for v in range(6)]
        assert per_arm[0] >= 16 and per_arm[3:] == [1, 1, 1], per_arm
        assert s.best()[1] <= 1.02, (seed, s.best())


def test_tpe_halving_tries_the_incumbents_tile_in_the_other_variants():
    """Variant x has two cases, the faster at A=4 B=1; variant y looks slow everywhere (3.0 and up)
    except at its own A=4 B=1 (1.0): the needle that a tile shape found in one variant points to in
    the next. y's analogue of x's incumbent is among y's first three proposals, for every seed (at
    random: about 3 in 36)."""
    cands = [("x", 4, 1), ("x", 0, 5)] + [("y", a, b) for a in range(6) for b in range(6)]

    def f(c):
        if c[0] == "x":
            return 2.0 if c[1:] == (4, 1) else 2.5
        return 1.0 if c[1:] == (4, 1) else 3.0 + 0.01 * (c[1] + c[2])

    for seed in range(5):
        s = strategies.make("tpe_halving", cands, seed, coords=lambda c: (c[0], {"A": c[1], "B": c[2]}),
                            budget_cases=12)
        ys = []
        while s.evaluated < 12:
            for i in s.ask(1):
                s.tell(i, f(cands[i]))
                if cands[i][0] == "y":
                    ys.append(cands[i])
        assert ("y", 4, 1) in ys[:3], (seed, ys)


def test_several_workers_write_each_case_once(tmp_path, spec):
    """Three CPU workers answer from the file in parallel into one result file, each case sleeping
    its recorded time (the baseline, tiled TS=32, is the slowest: other cases finish before it);
    every case still carries % of cuBLAS and its speedup."""
    run = replace(spec, strategy="random", budget=strategies.Budget(cases=30))
    outcome = sweep.execute(run, sweep.RunOptions(out=tmp_path / "r.csv", replay=H100, gpus=(0, 1, 2),
                                                  replay_scale=20.0))
    got = [r for r in rows(tmp_path / "r.csv") if r["status"] != "SKIP"]
    assert len(got) == 62 and len({results.case_key_of(r) for r in got}) == 62
    assert all(r["pct_vendor"] and r["speedup"] for r in got if r["variant"] != "cublas")
    assert outcome.restarts == 0


@pytest.mark.parametrize("tail, line, needles", [
    ("strategy: annealing\n", "strategy", ["'annealing' is not one of brute_force, random, tpe"]),
    ("strategy: random\n", "strategy", ["random needs a budget", "cases: N", "seconds: S"]),
    ("strategy: tpe\nbudget: {cases: 0}\n", "budget", ["budget.cases", "below the minimum 1"]),
    ("strategy: tpe\nbudget: {minutes: 3}\n", "budget", ["budget: unknown key 'minutes'", "cases, seconds"]),
    ("strategy: tpe\nbudget: {seconds: -2}\n", "budget", ["budget.seconds", "must be > 0"]),
    ("strategy: tpe\nbudget: {}\n", "budget", ["give cases: N"]),
    ("strategy: [tpe]\n", "strategy", ["expected a name"]),
])
def test_bad_strategy_or_budget_is_one_line_with_file_line_key(tmp_path, tail, line, needles):
    text = CONFIG.read_text() + tail
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    lines = text.splitlines()
    want = next(i for i in range(len(lines) - 1, -1, -1) if lines[i].startswith(line)) + 1
    with pytest.raises(ConfigError) as e:
        config.load_sweep(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}:{want}:"), msg
    for n in needles:
        assert n in msg, msg
    res = subprocess.run([sys.executable, "-m", "nnbench", "sweep", str(p), "--replay", str(H100)],
                         capture_output=True, text=True, cwd=paths.ROOT, timeout=60)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and f"{p}:{want}:" in res.stderr


def test_replay_from_the_command_line(tmp_path):
    cfg = tmp_path / "search.yaml"
    cfg.write_text(CONFIG.read_text() + "strategy: tpe\nbudget: {cases: 10}\n")
    res = subprocess.run([sys.executable, "-m", "nnbench", "sweep", str(cfg), "--replay", str(H100), "--out",
                          str(tmp_path / "r.csv")], capture_output=True, text=True, cwd=paths.ROOT, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "tpe (10 cases per shape) at 4096×4096×4096: evaluated 10 of 218 candidates" in res.stdout, res.stdout
    assert "replayed from" in res.stdout and "no kernel ran" in res.stdout


@needs_mpi
def test_mpi_ranks_run_a_sweep_into_one_file(tmp_path):
    """Rank 0 runs the sweep, ranks 1 and 2 (two local processes, as in CI) run its cases through
    mpi4py.futures, each with its own worker: every case once, every case compared."""
    cfg = tmp_path / "search.yaml"
    cfg.write_text(CONFIG.read_text() + "strategy: random\nbudget: {cases: 15}\n")
    out = tmp_path / "r.csv"
    res = subprocess.run([*mpirun_cmd(3), sys.executable, "-m", "mpi4py.futures", "-m", "nnbench", "sweep", str(cfg),
                          "--mpi", "--replay", str(H100), "--out", str(out)], capture_output=True, text=True,
                         cwd=paths.ROOT, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    got = [r for r in rows(out) if r["status"] != "SKIP"]
    assert len(got) == 32 and len({results.case_key_of(r) for r in got}) == 32
    assert all(r["speedup"] and r["pct_vendor"] for r in got if r["variant"] != "cublas")


@needs_mpi
def test_a_lost_mpi_rank_has_its_case_requeued(tmp_path):
    """One of two worker ranks dies while it holds a job (tests/mpi/lose_a_rank.py: its process exits at
    once, no answer, as if its node were gone). The job is sent again after 3 watchdog periods (3 s
    here, most of this test's time) and the other rank runs it and every later one: each case once,
    the re-queue said on stdout."""
    import os
    cfg = tmp_path / "search.yaml"
    cfg.write_text(CONFIG.read_text() + "strategy: random\nbudget: {cases: 6}\n")
    out, marker = tmp_path / "r.csv", tmp_path / "lost"
    env = dict(os.environ, NNBENCH_TEST_LOSE_MARKER=str(marker),
               PYTHONPATH=os.pathsep.join([str(paths.ROOT / "tests/mpi"), str(paths.ROOT)]))
    cmd = mpirun_cmd(3, "--enable-recovery", "-x", "NNBENCH_TEST_LOSE_MARKER", "-x", "PYTHONPATH")
    res = subprocess.run([*cmd, sys.executable, "-m", "mpi4py.futures", str(paths.ROOT / "tests/mpi/lose_a_rank.py"),
                          str(cfg), "--replay", str(H100), "--out", str(out), "--watchdog", "1"],
                         capture_output=True, text=True, cwd=paths.ROOT, env=env, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    said = " ".join(res.stdout.split())  # the console wraps lines
    assert marker.exists() and "1 case re-queued from lost MPI ranks" in said, res.stdout + res.stderr
    got = [r for r in rows(out) if r["status"] != "SKIP"]
    assert len(got) == 14 and len({results.case_key_of(r) for r in got}) == 14
    assert all(r["status"] == "PASS" for r in got)


def test_a_seconds_budget_stops_the_search(tmp_path, spec):
    """budget: {seconds: 0.3} with cases that take 50 ms each: the search stops after its round that
    crosses 0.3 s (rounds of 4 for TPE), far short of the 218 candidates (at least one round: on a
    loaded machine the rounds' own overhead counts against the budget too)."""
    run = replace(spec, strategy="tpe", budget=strategies.Budget(seconds=0.3), vendor=False,
                  shapes=spec.shapes[:1])
    outcome = sweep.execute(run, sweep.RunOptions(out=tmp_path / "r.csv", replay=H100, replay_sleep_ms=50))
    n = outcome.searches[0]["evaluated"]
    assert 4 <= n <= 13, n
