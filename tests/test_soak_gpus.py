"""`nnbench soak` made cheap and spread (nnbench/sweeps/soak.py, soakpool.py): the seeds split into contiguous
slices over worker processes (CPU workers here, GPUs on a GPU host), their rows merged into one --json file and
one list of failures as one process would print them; --time-limit stopping at a seed boundary; and what each
seed pays, counted: the compiles once per process, the float64 reference once per (seed, problem)."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest
from click.testing import CliRunner

from nnbench.cli import cli
from nnbench.runtime import open_backend
from nnbench.sweeps import soak, soakpool

from .conftest import gpu_available

AGAIN = r"again: nnbench soak --workload gemm --backend cpu --seed (\d+)"


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def verdict(rec: dict) -> tuple:
    """What a row says that does not depend on the clock (a net on the CPU backend has no float64 check)."""
    return rec["status"], rec.get("rel_err"), rec.get("test_accuracy")


def rows_of(path) -> list[dict]:
    lines = path.read_text().splitlines()
    return [json.loads(ln) for ln in lines[1:]]  # the first line is the file's header


@pytest.fixture(scope="module")
def cpu():
    return open_backend("cpu")[0]


@pytest.fixture
def planted(monkeypatch):
    """The workers run tests/soak_planted.py, with the defect the test names."""
    monkeypatch.setattr(soakpool, "MODULE", "tests.soak_planted")

    def plant(how: str) -> None:
        monkeypatch.setenv("NNBENCH_SOAK_PLANT", how)
    return plant


# -- the split -------------------------------------------------------------------------------------
@pytest.mark.parametrize("count, parts, sizes", [(10, 3, [4, 3, 3]), (1000, 8, [125] * 8), (3, 8, [1, 1, 1]),
                                                 (1, 1, [1]), (7, 2, [4, 3])])
def test_the_seeds_split_into_contiguous_slices_as_even_as_can_be(count, parts, sizes):
    seeds = list(range(100, 100 + count))
    slices = soakpool.split(seeds, parts)
    assert [len(s) for s in slices] == sizes
    assert [seed for s in slices for seed in s] == seeds  # contiguous, in order, each seed once


def test_more_workers_than_gpus_take_the_gpus_in_turn_each_with_its_own_slice():
    """Three workers on each of two GPUs: six slices as even as can be, contiguous and in order, the GPUs taking
    the slots in turn (every GPU three workers, never one GPU all of the first half)."""
    seeds = list(range(20))
    slices = soakpool.split(seeds, 2 * 3)
    assert [len(s) for s in slices] == [4, 4, 3, 3, 3, 3] and [x for s in slices for x in s] == seeds
    pinned = [soakpool.worker_backend("cuda", i, [0, 1]) for i in range(6)]
    assert pinned == ["cuda", "cuda:1", "cuda", "cuda:1", "cuda", "cuda:1"]
    assert [soakpool.worker_backend("cuda:2", i, [2, 3]) for i in range(4)] == ["cuda:2", "cuda:3"] * 2
    assert soakpool.worker_backend("cpu", 5, [0]) == "cpu"


@pytest.mark.parametrize("gpus, cores, expected", [(1, 16, 16), (2, 32, 16), (8, 128, 16), (2, 256, soakpool.AUTO_CAP),
                                                   (4, 2, 1), (1, 1, 1), (3, 20, 6)])
def test_auto_workers_per_gpu_is_each_gpus_share_of_the_cores_capped(gpus, cores, expected):
    assert soakpool.auto_workers_per_gpu(gpus, "cuda", cores) == expected
    assert soakpool.auto_workers_per_gpu(gpus, "cpu", cores) == 1  # --gpus N already counts the CPU workers


def test_the_help_names_the_cap_that_auto_keeps():
    assert f"at most {soakpool.AUTO_CAP} per GPU" in " ".join(run("soak", "--help").output.split())


def test_each_worker_starts_on_its_own_slice(monkeypatch):
    """Two workers on one slot: two processes, each handed its own contiguous slice; the seeds merged in order."""
    handed: list = []
    honest = soakpool._start

    def watched(s, *a):
        handed.append(list(s.todo))
        honest(s, *a)
    monkeypatch.setattr(soakpool, "_start", watched)
    seeds = [9, 3, 7, 1, 5]
    out = soakpool.run("cpu", [0], ["gemm"], seeds, per_gpu=2)
    assert handed == [[9, 3, 7], [1, 5]] and out.seeds == seeds and not out.failures


def test_several_workers_on_one_gpu_slot_give_every_seed_once_in_order(tmp_path):
    """--gpus 1 --workers-per-gpu 2 on the CPU backend (CI hosts have 2 cores): two workers, their rows in one
    file, every seed whole."""
    path = tmp_path / "soak.jsonl"
    res = run("soak", "--backend", "cpu", "--workload", "gemm", "--seeds", 5, "--gpus", 1, "--workers-per-gpu", 2,
              "--json", path)
    assert res.exit_code == 0, res.output
    assert "5 seeds · backend cpu · 2 CPU workers" in res.output and "5 of 5 seeds ran" in res.output, res.output
    per_seed = Counter(r["seed"] for r in rows_of(path))
    assert len(per_seed) == 5 and set(per_seed.values()) == {6}, per_seed


# -- what a seed covers ----------------------------------------------------------------------------
class _Gpu:
    name = "cuda"


# Kernels of a workload's table that are no case of their own: the model path that runs them, which the soak must
# take (pooling is a stage of LeNet-5's step).
INSIDE = {("conv", "avg"): "lenet5", ("conv", "max"): "lenet5"}


@pytest.mark.parametrize("name", soak.WORKLOADS)
def test_a_seed_takes_every_gpu_path_of_the_registry_on_some_problem(name):
    """Every variant the workload's package ships for the GPU (its registry table, not the workload's own pick) is
    a soak case, taken and not refused by at least one of a seed's problems; every vendor row the GPU has is
    wanted (PyTorch DDP's session then gives none without ranks: data-parallel training is no one-GPU path)."""
    from nnbench import workloads
    work = workloads.workload(name)
    gpu = [v for v in work.table if v.workload == name and v.backend != "cpu"]
    assert gpu
    chosen = {c.variant.name: c for c in soak.cases(name, _Gpu())}
    problems = soak.problems(name, 7)
    for v in gpu:
        case = chosen.get(INSIDE.get((name, v.name), v.name))
        assert case is not None, f"{name} {v.name}: no soak case"
        taken = [p for p in problems if work.applies(case, p) and not work.refusal(case, p)]
        assert taken, f"{name} {case.variant.name}: no soak problem takes it"
    assert all(work.vendor_wanted(n, list(chosen.values())) for n in work.vendor_names("cuda"))


# -- the merge -------------------------------------------------------------------------------------
def test_workers_give_the_rows_and_verdicts_one_process_gives(cpu):
    """The same seeds in one process and over 3 CPU workers: every (seed, workload, variant, shape) row once,
    with the same verdict; the seeds that ran in the given order."""
    seeds = [11, 12, 13, 14, 15, 16, 17]
    alone: dict = {}
    soak.soak(cpu, list(soak.WORKLOADS), seeds,
              lambda name, seed, rec: alone.setdefault((seed, name, rec["variant"], rec["shape"]), verdict(rec)))
    spread: Counter = Counter()
    errors: dict = {}

    def take(name, seed, rec):
        key = (seed, name, rec["variant"], rec["shape"])
        spread[key] += 1
        errors[key] = verdict(rec)
    out = soakpool.run("cpu", [0, 1, 2], list(soak.WORKLOADS), seeds, on_row=take)
    assert out.seeds == seeds and out.stopped is None and not out.failures
    assert set(spread) == set(alone) and set(spread.values()) == {1} and out.rows == len(alone)
    # the same rows, each as close as float32 sums in another BLAS thread count come (a worker's BLAS has its share
    # of the cores)
    assert errors == {k: (status, err if err is None else pytest.approx(err, rel=0.5), acc)
                      for k, (status, err, acc) in alone.items()}


def test_soak_gpus_on_the_cpu_backend_writes_one_json_file_of_whole_seeds(tmp_path):
    path = tmp_path / "soak.jsonl"
    res = run("soak", "--backend", "cpu", "--seeds", 5, "--gpus", 2, "--json", path)
    assert res.exit_code == 0, res.output
    assert "5 seeds · backend cpu · 2 CPU workers" in res.output
    assert re.search(r"\b0 failed · 5 of 5 seeds ran in [\d.]+ s \([\d.e+]+ seeds/s\)", res.output), res.output
    per_seed = Counter(r["seed"] for r in rows_of(path))
    assert len(per_seed) == 5 and len(set(per_seed.values())) == 1, per_seed  # every seed whole, none twice
    assert {r["workload"] for r in rows_of(path)} == set(soak.WORKLOADS)


@pytest.mark.parametrize("args, needles", [
    (["--gpus", "all"], ["--gpus all", "--backend cpu", "number of workers"]),
    (["--gpus", "0"], ["--gpus 0", ">= 1"]),
    (["--time-limit", "0"], ["--time-limit"]),
    (["--time-limit", "soon"], ["--time-limit"]),
    (["--gpus", "1", "--workers-per-gpu", "0"], ["--workers-per-gpu 0", "auto or a number of workers >= 1"]),
    (["--gpus", "1", "--workers-per-gpu", "many"], ["--workers-per-gpu many", "auto or a number"]),
    (["--gpus", "1", "--workers-per-gpu", "²"], ["--workers-per-gpu ²", "auto or a number"]),
    (["--workers-per-gpu", "2"], ["--workers-per-gpu 2", "needs --gpus"]),
    (["--gpus", "1", "--workers-per-gpu", "100000"], ["--workers-per-gpu 100000", "--backend cpu", "at most"]),
])
def test_bad_gpus_workers_and_time_limits_are_one_line(args, needles):
    res = run("soak", "--backend", "cpu", "--seeds", 2, *args)
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("nnbench: error:") and "Traceback" not in res.output, res.output
    assert all(n in lines[0] for n in needles), lines[0]


# -- the failure lines -----------------------------------------------------------------------------
def test_failures_in_workers_are_printed_with_their_seed_and_the_command_that_fails_again(planted, monkeypatch):
    """A draw-dependent defect planted in the workers: the failing seeds are named in the soak's order, each with
    the command that runs it alone; that command, with the same defect here, fails again."""
    planted("flaky")
    res = run("soak", "--backend", "cpu", "--workload", "gemm", "--seeds", 30, "--gpus", 2)
    assert res.exit_code == 1, res.output
    failed = [int(s) for s in re.findall(AGAIN, res.output)]
    assert failed and len(set(failed)) < 30, res.output
    lines = [ln for ln in res.output.splitlines() if "again:" in ln]
    assert all(re.match(r"FAIL gemm numpy .*at \S+, seed \d+: .+; again: ", ln) for ln in lines), lines
    from nnbench.workloads.gemm import session as gemm_session

    from .soak_planted import flaky_launcher
    monkeypatch.setattr(gemm_session, "_numpy_launcher", flaky_launcher(gemm_session._numpy_launcher))  # here too
    again = run("soak", "--backend", "cpu", "--workload", "gemm", "--seed", failed[0])
    assert again.exit_code == 1 and f"seed {failed[0]}:" in again.output, again.output


def test_failures_from_workers_come_in_the_order_of_the_seeds(planted):
    """Both workers' failures, merged, in the order one process would have found them."""
    planted("flaky")
    seeds = list(range(60, 0, -1))  # descending: arrival order or a plain sort would not pass for it
    out = soakpool.run("cpu", [0, 1], ["gemm"], seeds)
    at = [seeds.index(f.seed) for f in out.failures]
    assert at == sorted(at) and min(at) < 30 <= max(at), at  # failures from both slices, in order


def test_a_worker_that_dies_is_an_error_row_for_its_seed_and_the_rest_of_its_slice_still_runs(planted, tmp_path):
    planted("die")  # each worker process dies as it starts the GEMMs of its second seed
    path = tmp_path / "soak.jsonl"
    res = run("soak", "--backend", "cpu", "--workload", "gemm", "--seeds", 3, "--gpus", 1, "--json", path)
    assert res.exit_code == 1, res.output
    died = [ln for ln in res.output.splitlines() if "the soak worker: it exited with code 3" in ln]
    assert len(died) == 1 and re.search(AGAIN, died[0]), res.output
    assert "3 of 3 seeds ran" in res.output, res.output  # the third on a fresh worker
    statuses = Counter((r["seed"], r["status"]) for r in rows_of(path))
    assert sorted(Counter(s for _, s in statuses).items()) == [("ERROR", 1), ("PASS", 2)], statuses


# -- the time limit --------------------------------------------------------------------------------
def test_the_time_limit_stops_at_a_seed_boundary_and_says_how_many_ran(tmp_path, monkeypatch):
    honest = soak.problems

    def slow(workload, seed=0):
        if workload == "gemm":
            import time
            time.sleep(0.3)
        return honest(workload, seed)
    monkeypatch.setattr(soak, "problems", slow)
    path = tmp_path / "soak.jsonl"
    res = run("soak", "--backend", "cpu", "--workload", "gemm", "--seeds", 10, "--time-limit", 0.5, "--json", path)
    assert res.exit_code == 0, res.output
    m = re.search(r"(\d+) of 10 seeds ran in .* · stopped at the --time-limit of 0.5 s: (\d+) not run", res.output)
    assert m and 1 <= int(m.group(1)) < 10 and int(m.group(1)) + int(m.group(2)) == 10, res.output
    per_seed = Counter(r["seed"] for r in rows_of(path))
    assert len(per_seed) == int(m.group(1)) and set(per_seed.values()) == {6}, per_seed  # whole seeds only


def test_the_time_limit_holds_over_workers(planted):
    planted("slow")
    res = run("soak", "--backend", "cpu", "--workload", "gemm", "--seeds", 40, "--gpus", 2, "--time-limit", 2)
    assert res.exit_code == 0, res.output
    m = re.search(r"(\d+) of 40 seeds ran .* stopped at the --time-limit of 2 s: (\d+) not run", res.output)
    assert m and 1 <= int(m.group(1)) < 40, res.output


# -- what a seed costs -----------------------------------------------------------------------------
def test_each_seed_pays_its_references_and_no_compile(cpu, monkeypatch):
    """Counted, not timed: the workloads compile once per process whatever the seeds, and no seed autotunes; each
    (seed, problem) makes its inputs and float64 reference once (GEMM, convolution) or its trainer once (a net:
    its data, and on a GPU its float64 reference), shared by every row; nothing for a problem no path takes."""
    from nnbench import harness, workloads
    from nnbench.workloads.conv import launch as conv_launch
    from nnbench.workloads.gemm import session as gemm_session
    from nnbench.workloads.train import batched, mlp
    count: Counter = Counter()

    def spy(owner, attr, key, static=False):
        honest = getattr(owner, attr)

        def counted(*a, **k):
            count[key] += 1
            return honest(*a, **k)
        monkeypatch.setattr(owner, attr, staticmethod(counted) if static else counted)
    for name in soak.WORKLOADS:
        spy(type(workloads.workload(name)), "compile", "compile")
    spy(gemm_session.Problem, "make", "gemm reference", static=True)
    spy(conv_launch, "conv_reference", "conv reference")
    spy(mlp, "PerSampleRun", "net")
    spy(batched, "BatchRun", "net")
    from nnbench.workloads.conv import lenet
    spy(lenet, "LeNetRun", "LeNet-5 data")  # none: no path of the CPU backend takes LeNet-5's problems
    given: list = []
    honest_run = harness.run

    def watched(*a, **k):
        given.append((k.get("compiled"), k.get("tuner")))
        return honest_run(*a, **k)
    monkeypatch.setattr(harness, "run", watched)
    for seeds in ([5], [5, 6, 7, 8]):
        count.clear()
        out = soak.soak(cpu, list(soak.WORKLOADS), seeds)
        n = len(seeds)
        assert not out.failures and out.seeds == seeds
        assert count == {"compile": 3, "gemm reference": 6 * n, "conv reference": 6 * n, "net": 2 * n}, count
    # harness.run never compiles per seed itself, and runs the fixed tiles: no autotuner times candidates per seed
    assert given and all(compiled is not None and tuner is None for compiled, tuner in given)


class _Watched:
    """test_measure's FakeBackend that counts its NVML readings (a clock, a telemetry window)."""

    def __init__(self):
        from .test_measure import FakeBackend
        self.be, self.reads = FakeBackend([1e-3] * 10_000), 0
        self.calls = self.be.calls

    def __getattr__(self, name):
        return getattr(self.be, name)

    def telemetry(self):
        self.reads += 1
        return None

    def sm_clock_mhz(self):
        self.reads += 1
        return 1980.0


def test_a_soak_times_every_launch_once_whatever_settings_the_workload_fixed(cpu, monkeypatch):
    """The trainers and PyTorch's rows time with their own settings (10 samples over 0.3 s, host-issued ones a
    whole second), and LeNet-5's host-issued steps run 50 calls, not the soak's: while a soak runs, every measure
    call is the warm-up and one sample, with no NVML reading, and a host-issued step one call; outside a soak
    they are as before."""
    from nnbench import measure
    from nnbench.workloads.conv import lenet
    from nnbench.workloads.train import batched, mlp
    fixed = (mlp.BLOCK_TIMING, batched.STEP_TIMING, batched.EAGER_TIMING, batched.LAUNCH_TIMING)
    seen: list = []
    honest = soak._seeds

    def during(*a):  # measured from inside the soak's loop, as its rows are
        for settings in fixed:
            be = _Watched()
            s = measure.measure(be, lambda: None, settings)
            seen.append((be.calls, s.samples, be.reads, s.energy_j))
        watched = _Watched()
        measure.RunWatch(watched)  # PyTorch's per-sample epochs, timed outside measure
        seen.append(watched.reads)
        lenet.host_issued_ms(watched, lambda: None)  # LeNet-5's host-issued steps, ours and PyTorch's
        seen.append(watched.calls)
        return honest(*a)
    monkeypatch.setattr(soak, "_seeds", during)
    soak.soak(cpu, ["gemm"], [1])
    assert seen == [([1, 1], 1, 0, None)] * len(fixed) + [0, [1]], seen
    assert not measure.VERDICTS_ONLY[0]  # over once the soak is
    be = _Watched()
    assert measure.measure(be, lambda: None, batched.STEP_TIMING).samples >= 10 and be.reads > 0
    be = _Watched()
    lenet.host_issued_ms(be, lambda: None)
    assert be.calls == [lenet.ISSUED_REPS]


def test_each_seed_trains_its_own_draws(tmp_path):
    """A net's draws come from its hyperparameters: the soak's seed must reach them, or every seed trains the
    same net and the row says a seed it did not use."""
    rows = {}
    for seed in (3, 4):
        path = tmp_path / f"{seed}.jsonl"
        assert run("soak", "--backend", "cpu", "--workload", "train", "--seed", seed, "--json", path).exit_code == 0
        rows[seed] = [r for r in rows_of(path) if r["workload"] == "train"]
        assert rows[seed] and {r["seed"] for r in rows[seed]} == {seed}
    assert [r.get("test_accuracy") for r in rows[3]] != [r.get("test_accuracy") for r in rows[4]] or \
        [r.get("final_error") for r in rows[3]] != [r.get("final_error") for r in rows[4]]


# -- on the GPUs -----------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="needs a CUDA GPU")
def test_four_seeds_over_two_workers_on_every_gpu_pass(tmp_path):
    """Two workers per GPU, each with a CUDA context of its own, every GPU taking some of the seeds."""
    from nnbench.sweeps.worker import count_gpus
    path = tmp_path / "soak.jsonl"
    res = run("soak", "--backend", "cuda", "--seeds", 4, "--gpus", "all", "--workers-per-gpu", 2, "--json", path)
    assert res.exit_code == 0, res.output
    assert " 0 failed · 4 of 4 seeds ran" in res.output, res.output
    recs = rows_of(path)
    assert {r["workload"] for r in recs} == set(soak.WORKLOADS) and len({r["seed"] for r in recs}) == 4
    assert all(r["status"] in ("PASS", "SKIP", "REFERENCE") for r in recs)
    assert len({r.get("device_index") for r in recs}) == min(count_gpus(), 4)


# -- stopping --------------------------------------------------------------------------------------
def _tagged(tag: str) -> list[int]:
    """The live processes whose environment holds `tag`: the soak's parent and the workers it started."""
    from pathlib import Path
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and tag.encode() in (proc / "environ").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT"])
def test_sigterm_or_ctrl_c_stops_every_worker_and_keeps_the_rows(tmp_path, how):
    import os
    import signal
    import subprocess
    import sys
    import time
    import uuid

    from nnbench import paths
    tag = f"soak-test-{uuid.uuid4().hex}"
    path = tmp_path / "soak.jsonl"
    env = dict(os.environ, NNBENCH_SOAK_TEST_TAG=tag,
               PYTHONPATH=os.pathsep.join(filter(None, [str(paths.ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.Popen([sys.executable, "-m", "nnbench", "soak", "--backend", "cpu", "--seeds", "100000",
                             "--gpus", "2", "--json", str(path)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        t_end = time.monotonic() + 60
        while (not path.exists() or len(path.read_text().splitlines()) < 30) and time.monotonic() < t_end:
            time.sleep(0.1)
        # the parent and both workers, and at times a short-lived child of one (a probe it runs while it starts):
        # at least three, so that the stop below has workers to stop
        assert len(_tagged(tag)) >= 3
        # Ctrl-C reaches the terminal's whole process group; SIGTERM (a CI timeout, `kill`) the parent alone
        os.killpg(proc.pid, signal.SIGINT) if how == "SIGINT" else proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == (143 if how == "SIGTERM" else 130), output
    assert "every row already written is kept" in output and "Traceback" not in output, output
    rows = rows_of(path)
    assert len(rows) >= 29 and all(r["workload"] in soak.WORKLOADS for r in rows)
    time.sleep(0.5)
    assert _tagged(tag) == [], "a worker outlived its soak"
