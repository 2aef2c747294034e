"""The stages of `sweep.execute`, each on its own and without a worker: what a resumed file holds (`read_done`),
which cases run again (`pending`), what is refused before compiling (`refusals`), who runs the jobs
(`choose_runner`) and which backend each worker opens (`worker_factory`)."""

import pytest

from nnbench import results
from nnbench.sweeps import config, sweep

SPEC = """
name: stages
workload: gemm
baseline: numpy
shapes:
  - [5, 7, 3]
  - [9, 9, 9]
variants:
  numpy:
  tiled:
    axes: {ts: [8, 16]}
"""
ENV = {"driver": "1", "cuda": "12.4", "nvcc": "12.4", "cc": "9.0"}


@pytest.fixture
def spec(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SPEC)
    return config.load_sweep(path)


def row(workload, variant, status, median=None, params="", shape="5×7×3", provenance="p"):
    return {"workload": workload, "variant": variant, "step": 0 if variant == "numpy" else 2, "params": params,
            "shape": shape, "status": status, "median_ms": median, "cold": False, "provenance": provenance}


def result_file(tmp_path, rows):
    sink = results.CsvSink(tmp_path / "r.csv", fields=results.FIELDS)
    for r in rows:
        sink.append(r)
    sink.close()
    return sink.path


def test_a_new_file_holds_nothing(tmp_path):
    assert sweep.read_done(None, "gemm", False, None).keys == set()
    assert sweep.read_done(tmp_path / "absent.csv", "gemm", False, None).status == {}


def test_read_done_keeps_its_workloads_last_rows_and_hands_them_on(tmp_path):
    path = result_file(tmp_path, [row("gemm", "numpy", "ERROR"), row("gemm", "numpy", "PASS", 2.0),
                                  row("gemm", "tiled", "ERROR", params="TS=8"), row("conv", "direct", "PASS", 1.0)])
    seen = []
    done = sweep.read_done(path, "gemm", False, None, seen.append)
    numpy, tiled = (results.case_key_of(row("gemm", v, "", params=p)) for v, p in (("numpy", ""), ("tiled", "TS=8")))
    assert done.status == {numpy: "PASS", tiled: "ERROR"}  # the last row counts; conv's row is not this sweep's
    assert done.median_ms == {numpy: 2.0, tiled: None} and done.provenance == {numpy: "p", tiled: "p"}
    assert done.keys == {numpy, tiled} and len(seen) == 3 and {r["workload"] for r in seen} == {"gemm"}
    assert sweep.read_done(path, "gemm", True, None).keys == {numpy}  # --retry-errors runs the ERROR again


def test_a_file_of_the_schema_before_the_workload_column_resumes(tmp_path):
    """Its header says `suite` (and rows of old family names): read in today's names, so its cases are done."""
    sink = results.CsvSink(tmp_path / "old.csv", fields=results.FIELDS_BEFORE_WORKLOAD)
    old = {"suite" if k == "workload" else k: v for k, v in row("gemm", "numpy", "PASS", 2.0).items()}
    sink.append(old)
    sink.append(dict(old, suite="conv-backward", variant="unroll-backward"))
    sink.close()
    seen = []
    done = sweep.read_done(sink.path, "gemm", False, None, seen.append)
    assert done.keys == {results.case_key_of(row("gemm", "numpy", ""))}
    assert [r["workload"] for r in seen] == ["gemm"] and "suite" not in seen[0]
    assert sweep.read_done(sink.path, "conv", False, None).status == {
        results.case_key_of(row("conv", "unroll-backward", "")): "PASS"}


def test_a_case_the_json_file_lacks_is_not_done(tmp_path):
    path = result_file(tmp_path, [row("gemm", "numpy", "PASS", 2.0)])
    # the CSV took the row, the --json file did not (a full disk between the writes): it runs again
    assert sweep.read_done(path, "gemm", False, tmp_path / "r.jsonl").keys == set()


def test_pending_runs_what_is_not_done_and_what_changed(spec):
    jobs = sweep.plan_jobs(spec, False, "cpu")
    keys = [sweep.job_key(spec, j) for j in jobs]
    now = {k: sweep.job_provenance(spec, j, ENV) for k, j in zip(keys, jobs, strict=True)}
    done = sweep.Done(provenance=dict(now, **{keys[1]: "an older kernel"}), keys=set(keys[:3]))
    todo, stale = sweep.pending(spec, jobs, done, ENV)
    assert stale == {keys[1]}
    assert [sweep.job_key(spec, j) for j in todo] == [keys[1]] + keys[3:]


def test_refusals_name_the_backend_a_kernel_needs(spec):
    jobs = sweep.plan_jobs(spec, False, "cpu")
    skip = sweep.refusals(spec, jobs, "cpu", None)
    refused = [j for j in jobs if id(j) in skip]
    assert {j.case.variant.name for j in refused} == {"tiled"} and len(refused) == 4
    assert all("runs on the cuda backend; this sweep runs on cpu" in skip[id(j)] for j in refused)


@pytest.mark.parametrize("opts, runner", [
    (sweep.RunOptions(), "pool"),
    (sweep.RunOptions(gpus=(0, 1)), "pool"),
    (sweep.RunOptions(mpi=True), "mpi"),
    (sweep.RunOptions(mpi=True, load_only=True), "load"),
    (sweep.RunOptions(replay="r.csv", gpus=(0, 1, 2)), "pool"),
])
def test_choose_runner(opts, runner):
    assert sweep.choose_runner(opts) == runner


@pytest.mark.parametrize("backend, gpus, opened", [
    ("cuda", (), ["cuda", "cuda"]),
    ("cuda", (0, 2), ["cuda", "cuda:2"]),
    ("cuda:2", (2, 3), ["cuda:2", "cuda:3"]),
    ("cpu", (0, 1), ["cpu", "cpu"]),
    ("replay:r.csv", (0, 1), ["replay:r.csv", "replay:r.csv"]),
])
def test_each_worker_opens_its_own_gpu(monkeypatch, spec, backend, gpus, opened):
    got = []
    monkeypatch.setattr(sweep, "Worker", lambda name, *a, share, **k: got.append((name, share)))
    make = sweep.worker_factory(spec, backend, gpus)
    make(0)
    make(1 if gpus else 0)
    assert got == [(name, len(gpus) or 1) for name in opened]
