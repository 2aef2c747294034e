"""Sweeps on the CPU: axis forms, restrictions, YAML errors with lines, the plan's counts, a real
sweep through the worker process, resume, a killed worker, a killed sweep, and flat memory."""

import csv
import os
import signal
import subprocess
import sys
import time
import tracemalloc
from dataclasses import replace

import pytest

from nnbench import paths, results, space
from nnbench.errors import NnbenchError
from nnbench.expr import ExprError
from nnbench.sweeps import config, sweep
from nnbench.yamlnodes import ConfigError

# -- axes and restrictions ------------------------------------------------------------------------


def test_range_includes_both_ends_and_steps():
    assert tuple(space.int_range(8, 32, 8)) == (8, 16, 24, 32)
    assert tuple(space.int_range(1, 3)) == (1, 2, 3)
    assert tuple(space.int_range(5, 5)) == (5,)
    with pytest.raises(space.SpaceError):
        space.int_range(4, 1)
    with pytest.raises(space.SpaceError):
        space.int_range(1, 4, 0)


def test_powers_of_two():
    assert space.powers_of_two(1, 32) == (1, 2, 4, 8, 16, 32)
    assert space.powers_of_two(16, 16) == (16,)
    for lo, hi in ((3, 16), (1, 24), (32, 16)):
        with pytest.raises(space.SpaceError):
            space.powers_of_two(lo, hi)


def test_expand_counts_what_restrictions_exclude():
    axes = {"TS": (16, 32, 64), "WPT": (1, 2, 4, 8, 16, 32)}
    exp = space.expand(axes, [space.Restriction("ts % wpt == 0"), space.Restriction("TS * TS / wpt <= 1024")])
    assert exp.total == 18
    assert {(p["TS"], p["WPT"]) for p in exp.points} == {
        (16, 1), (16, 2), (16, 4), (16, 8), (16, 16), (32, 1), (32, 2), (32, 4), (32, 8), (32, 16), (32, 32),
        (64, 4), (64, 8), (64, 16), (64, 32)}
    assert exp.restricted == 18 - 15


@pytest.mark.parametrize("text, needle", [
    ("__import__('os').system('true')", "allowed: abs, cdiv"),
    ("__import__('os')", "calls __import__()"),
    ("ts.__class__", "Attribute"),
    ("open('x')", "calls open()"),
    ("ts[0] == 1", "Subscript"),
    ("'a' == 'a'", "only numbers"),
    ("bogus > 1", "bogus"),
])
def test_restrictions_are_parsed_never_evaluated_by_python(text, needle):
    with pytest.raises((ExprError, space.SpaceError)) as e:
        space.expand({"TS": (8, 16)}, [space.Restriction(text)])
    assert needle in str(e.value)


# -- sweep configs ----------------------------------------------------------------------------------
def write(tmp_path, text, name="s.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_shipped_sweeps_load_with_counts():
    spec = config.load_sweep(paths.CONFIGS / "gemm_sweep.yaml")
    assert len(spec.cases) >= 64  # the compile-time target needs at least 64 distinct kernels
    by = {c.variant: c for c in spec.counts}
    assert by["coarsened"].product == 18 and by["coarsened"].restricted == 6
    for c in spec.counts:
        assert c.product == c.restricted + c.invalid + c.cases
    assert spec.baseline.variant.name == "tiled" and spec.cases[0] == spec.baseline
    ci = config.load_config(paths.CONFIGS / "ci.yaml")
    assert [part.workload_name for part in ci] == ["gemm", "train", "conv"]
    assert {c.variant.name for c in ci[0].cases} >= {"naive", "double_buffered", "tf32x3"}
    assert {c.variant.name for c in ci[1].cases} == {"fused", "batched"}
    assert {c.variant.name for c in ci[2].cases} >= {"direct", "unroll", "unroll-backward"}
    for name in ("train_table", "batched", "conv_sweep", "step4_space"):
        for part in config.load_config(paths.CONFIGS / f"{name}.yaml"):
            assert part.cases and part.shapes


def test_mlp_shape_set_comes_from_the_nets(tmp_path):
    p = write(tmp_path, "suite: gemm\nvariants: {naive: }\nshapes:\n  - {set: mlp, nets: [1], batch: 32}\n")
    shapes = {(s.M, s.N, s.K) for s in config.load_sweep(p).shapes}
    # Net 1 is 60-60-60-7, as the trainer launches it (the bias a row of ones under the inputs): forward
    # (out, B, in + 1), backward data (in, B, out), weight gradients (in + 1, out, B)
    assert shapes == {(60, 32, 61), (61, 60, 32), (60, 32, 60), (7, 32, 61), (60, 32, 7), (61, 7, 32)}
    from nnbench.workloads.train import batched
    assert shapes == {(m, n, k) for _, m, n, k in batched.gemm_shapes((60, 60, 60, 7), 32)}


BASE = "suite: gemm\nshapes:\n  - [8, 8, 8]\n"


@pytest.mark.parametrize("text, line, needles", [
    (BASE + "variants:\n  tiled:\n    axes: {ts: [8, 64]}\n", 6, ["variants.tiled.axes.ts", "64 is not allowed",
                                                              "{8, 16, 32}"]),
    (BASE + "variants:\n  tiled:\n    axis: {ts: 8}\n", 6, ["unknown key 'axis'", "allowed: axes, restrict"]),
    (BASE + "variants:\n  coarsened:\n    axes: {tss: 8}\n", 6, ["no parameter 'tss'", "allowed: TS, WPT"]),
    (BASE + "variants:\n  coarsened:\n    axes: {ts: 32}\n    restrict:\n      - ts % wpt == 0\n"
            "      - __import__('os')\n", 9, ["restrict", "calls __import__()"]),
    (BASE + "variants:\n  coarsened:\n    restrict: [tile > 2]\n", 6, ["tile", "allowed names: TS, WPT"]),
    (BASE + "variants:\n  coarsened:\n    axes:\n      wpt: {pow2: [3, 8]}\n", 7, ["power-of-two bounds"]),
    (BASE + "variants:\n  coarsened:\n    axes:\n      wpt: {start: 1}\n", 7, ["{start, stop, step}"]),
    (BASE + "variants:\n  bogus:\n", 5, ["unknown key 'bogus'", "naive"]),
    (BASE + "variants: {naive: }\ntiming: {budget: -1}\n", 5, ["timing.budget", "must be > 0"]),
    (BASE + "variants: {naive: }\ntiming: {cold: maybe}\n", 5, ["timing.cold", "true or false"]),
    (BASE + "variants: {naive: }\ntiming: {budgett: 1}\n", 5, ["unknown key 'budgett'", "budget, cold"]),
    (BASE + "variants: {naive: }\nbaseline: fastest\n", 5, ["baseline", "'fastest' is not one of"]),
    ("suite: cnn\nvariants: {}\nshapes: []\n", 1, ["workload", "not one of gemm, train, conv"]),
    ("suite: train\nvariants: {fused: }\nshapes:\n  - {nets: [9]}\n", 4, ["shapes.nets", "no net '9'"]),
    ("suite: conv\nvariants: {direct: }\nshapes:\n  - {model: alexnet}\n", 4, ["shapes.model", "lenet5"]),
    ("suite: gemm\nvariants: {naive: }\nshapes:\n  - {set: huge}\n", 4, ["shapes.set", "square, skinny, odd, mlp"]),
    ("suite: gemm\nvariants: {naive: }\nshapes:\n  - {set: mlp, nets: [9]}\n", 4, ["no net '9'"]),
    ("suite: gemm\nvariants: {naive: }\nshapes:\n  - [0, 1, 1]\n", 4, ["below the minimum 1"]),
    ("suite: gemm\nvariants: {naive: }\n", 1, ["missing key 'shapes'"]),
    (BASE + "variants:\n  coarsened:\n    axes: {ts: 16, wpt: 32}\n", 5, ["every point was excluded"]),
])
def test_sweep_yaml_errors_name_file_line_key(tmp_path, text, line, needles):
    p = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        config.load_sweep(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}:{line}:"), msg
    for n in needles:
        assert n in msg, msg


# -- running on the CPU backend, through the worker process ----------------------------------------
CPU_SWEEP = """
name: cpu_test
suite: gemm
baseline: numpy
seed: 3
shapes:
{shapes}
timing: {{budget: {budget}, min_samples: 2, max_noise: 1.0, watchdog: 60}}
variants:
  numpy:
  tiled:
    axes: {{ts: [8, 16]}}
"""


def cpu_spec(tmp_path, shapes, budget=0.001):
    text = CPU_SWEEP.format(shapes="\n".join(f"  - [{m}, {n}, {k}]" for m, n, k in shapes), budget=budget)
    return config.load_sweep(write(tmp_path, text))


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_cpu_sweep_writes_every_case_and_resumes(tmp_path):
    spec = cpu_spec(tmp_path, [(5, 7, 3), (33, 17, 9)])
    out = tmp_path / "r.csv"
    first = sweep.execute(spec, sweep.RunOptions("cpu", out))
    got = rows(out)
    # per shape: numpy (the baseline) runs; tiled is a CUDA kernel, so both TS values are SKIP rows
    assert [r["status"] for r in got] == ["PASS", "SKIP", "SKIP"] * 2
    assert first.jobs == 2 and first.skipped == 4 and first.resumed == 0
    assert all(float(r["rel_err"]) < 1e-6 for r in got if r["status"] == "PASS")
    assert all(r["sweep"] == "cpu_test" and r["speedup"] == "1.0" for r in got if r["status"] == "PASS")
    assert "cuda backend" in got[1]["error"]

    again = sweep.execute(spec, sweep.RunOptions("cpu", out))
    assert again.jobs == 0 and again.resumed == 6 and len(rows(out)) == 6
    assert [r["shape"] for r in again.summary.rows() if r.get("best")] == ["5×7×3", "33×17×9"]


def test_new_points_in_the_config_run_on_resume(tmp_path):
    out = tmp_path / "r.csv"
    sweep.execute(cpu_spec(tmp_path, [(5, 7, 3)]), sweep.RunOptions("cpu", out))
    grown = sweep.execute(cpu_spec(tmp_path, [(5, 7, 3), (9, 9, 9)]), sweep.RunOptions("cpu", out))
    assert grown.resumed == 3 and grown.jobs == 1
    assert len(rows(out)) == 6


def test_fresh_never_overwrites(tmp_path):
    spec = cpu_spec(tmp_path, [(5, 7, 3)])
    out = tmp_path / "r.csv"
    sweep.execute(spec, sweep.RunOptions("cpu", out))
    with pytest.raises(NnbenchError, match="--fresh would overwrite"):
        sweep.execute(spec, sweep.RunOptions("cpu", out, fresh=True))


def test_a_killed_worker_is_recorded_and_replaced(tmp_path):
    """SIGKILL the worker in the middle of a case: that case is an ERROR naming the signal, a fresh
    worker runs the rest, and every case is in the file once."""
    spec = cpu_spec(tmp_path, [(64, 64, 64), (300, 300, 300), (310, 305, 301)], budget=0.5)
    spec = replace(spec, settings=replace(spec.settings, max_noise=0.0))  # keep each case busy for its budget
    out = tmp_path / "r.csv"
    pids = []

    def events(kind, **d):
        if kind == "worker":
            pids.append(d["pid"])
        if kind == "phase" and d["what"] == "running" and len(pids) == 1 and os.path.exists(out) \
                and len(rows(out)) >= 3:  # smallest shape first: the 300^3 case is the 4th
            os.kill(pids[0], signal.SIGKILL)

    outcome = sweep.execute(spec, sweep.RunOptions("cpu", out), events)
    got = rows(out)
    assert len(got) == 9 and len({results.case_key_of(r) for r in got}) == 9
    errors = [r for r in got if r["status"] == "ERROR"]
    assert len(errors) == 1 and "SIGKILL" in errors[0]["error"] and errors[0]["shape"] == "300×300×300"
    assert outcome.restarts == 1 and len(pids) == 2 and pids[0] != pids[1]
    assert [r["status"] for r in got if r["shape"] == "310×305×301"][0] == "PASS"


def test_a_killed_sweep_resumes_where_it_stopped(tmp_path):
    """SIGKILL the whole sweep (parent and worker) mid-run, then run the same command again: the
    rows already on disk are kept, the rest run, and no case appears twice."""
    shapes = [(40 + i, 30 + i, 20 + i) for i in range(12)]
    cfg = write(tmp_path, CPU_SWEEP.format(shapes="\n".join(f"  - [{m}, {n}, {k}]" for m, n, k in shapes),
                                           budget=0.3).replace("max_noise: 1.0", "max_noise: 1e-9"))
    out = tmp_path / "r.csv"
    cmd = [sys.executable, "-m", "nnbench", "sweep", str(cfg), "--backend", "cpu", "--out", str(out)]
    env = dict(os.environ, PYTHONPATH=str(paths.ROOT))
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            env=env)
    deadline = time.time() + 60
    while time.time() < deadline and not (out.exists() and len(rows(out)) >= 7):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = rows(out)
    assert 7 <= len(before) < 36, len(before)

    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    assert f"({len(before)} resumed from the file)" in res.stdout, res.stdout
    after = rows(out)
    keys = [results.case_key_of(r) for r in after]
    assert len(keys) == 36 and len(set(keys)) == 36
    assert after[:len(before)] == before  # nothing already measured was touched


def test_memory_stays_flat_over_a_long_sweep(tmp_path):
    """The parent streams records to disk and keeps only the plan and the per-shape summary.
    Between a 300-row and a 1,500-row sweep its peak memory may grow by the plan's share, but by
    far less than it would cost to hold the records themselves (measured here, not assumed)."""
    def peak(n_shapes):
        spec = cpu_spec(tmp_path, [(2 + i % 7, 3, 2 + i // 7) for i in range(n_shapes)])
        tracemalloc.start()
        sweep.execute(spec, sweep.RunOptions("cpu", tmp_path / f"m{n_shapes}.csv"))
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return top

    small, large = peak(100), peak(500)
    growth_per_row = (large - small) / (3 * 400)
    tracemalloc.start()
    held = [results.parse_row(r) for r in rows(tmp_path / "m500.csv")]
    record_cost = tracemalloc.get_traced_memory()[0] / len(held)
    tracemalloc.stop()
    assert growth_per_row < 0.5 * record_cost, (growth_per_row, record_cost)


def _worker_pids() -> list[int]:
    """This process's nnbench worker children (from /proc)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if ppid == os.getpid() and b"nnbench.sweeps.worker" in cmd:
            out.append(int(d))
    return out


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="finds the workers through /proc")
def test_a_killed_worker_among_several_is_replaced(tmp_path):
    """Two CPU workers (--gpus 2 on the CPU backend); SIGKILL one in the middle of a case: that case
    is an ERROR naming the signal, a fresh worker takes the slot, and every case is in the file once."""
    import threading
    shapes = [(64 + i, 64, 64) for i in range(8)]
    spec = cpu_spec(tmp_path, shapes, budget=0.4)
    spec = replace(spec, settings=replace(spec.settings, max_noise=0.0))  # keep each case busy for its budget
    out = tmp_path / "r.csv"
    killed = []

    def killer():
        deadline = time.time() + 60
        while time.time() < deadline:
            if out.exists() and len(rows(out)) >= 6 and len(pids := _worker_pids()) == 2:
                time.sleep(0.1)  # inside the next cases
                os.kill(pids[0], signal.SIGKILL)
                killed.append(pids[0])
                return
            time.sleep(0.02)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    outcome = sweep.execute(spec, sweep.RunOptions("cpu", out, gpus=(0, 1)))
    t.join()
    got = rows(out)
    assert killed and len(got) == 24 and len({results.case_key_of(r) for r in got}) == 24
    errors = [r for r in got if r["status"] == "ERROR"]
    assert len(errors) == 1 and "SIGKILL" in errors[0]["error"], errors
    assert outcome.restarts == 1
    assert sum(r["status"] == "PASS" for r in got) == 7 and all(r["speedup"] for r in got if r["status"] == "PASS")


def test_cpu_workers_are_bounded_by_the_jobs(tmp_path, monkeypatch):
    """--gpus 8 --backend cpu for 3 jobs starts 3 workers, not 8 (the issue: 24 workers for 4 cases)."""
    sizes = []
    real = sweep.WorkerPool

    def recording(make, size, *a, **kw):
        sizes.append(size)
        return real(make, size, *a, **kw)
    monkeypatch.setattr(sweep, "WorkerPool", recording)
    spec = cpu_spec(tmp_path, [(5, 7, 3)])
    sweep.execute(spec, sweep.RunOptions("cpu", tmp_path / "r.csv", gpus=tuple(range(8))))
    assert sizes == [3] and len(rows(tmp_path / "r.csv")) == 3


@pytest.mark.parametrize("value, needle", [("²", "--gpus ²: expected all or a number"),
                                           ("100000", "--gpus 100000: with --backend cpu, at most")])
def test_gpus_option_bounds(tmp_path, value, needle):
    from click.testing import CliRunner

    from nnbench.cli import app
    res = CliRunner().invoke(app.cli, ["sweep", "configs/ci.yaml", "--backend", "cpu", "--gpus", value,
                                       "--out", str(tmp_path / "o.csv")])
    assert res.exit_code == 2 and needle in res.output and "Traceback" not in res.output, res.output
    assert not (tmp_path / "o.csv").exists()
