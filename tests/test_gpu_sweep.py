"""On the GPU: a small real sweep end to end, and planted failures (an illegal address, a hang)
that are recorded with their CUDA error while the sweep goes on in a fresh worker."""

import csv
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from nnbench import measure
from nnbench.registry import Param, Variant
from nnbench.sweeps import config, sweep
from nnbench.workloads.base import Case
from nnbench.workloads.gemm import session as gemm

pytestmark = pytest.mark.gpu

SMALL = """
name: gpu_small
suite: gemm
baseline: naive
seed: 11
shapes:
  - [127, 255, 63]
  - [256, 256, 256]
timing: {budget: 0.05, min_samples: 5, watchdog: 30}
variants:
  naive:
  tiled:
    axes: {ts: {pow2: [8, 32]}}
  coarsened:
    axes: {ts: 32, wpt: [2, 4, 8]}
    restrict: [ts * ts / wpt >= 128]
"""

PLANTED = Path(__file__).parent / "kernels" / "planted.cu"


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_small_sweep_end_to_end(tmp_path):
    cfg = tmp_path / "s.yaml"
    cfg.write_text(SMALL)
    spec = config.load_sweep(cfg)
    out = tmp_path / "r.csv"
    outcome = sweep.execute(spec, sweep.RunOptions("cuda", out))
    got = rows(out)
    # per shape: cuBLAS FP32 and TF32, naive, tiled x3 (TS 8, 16, 32), coarsened x3 (WPT 2, 4, 8)
    assert len(got) == 2 * (2 + 1 + 3 + 3)
    assert all(r["status"] == "PASS" for r in got), [(r["variant"], r["error"]) for r in got]
    assert all(float(r["rel_err"]) < float(r["rtol"]) for r in got)
    # each row's limit is its precision's at its K (measure.error_limit), not a constant
    assert all(float(r["rtol"]) == pytest.approx(measure.error_limit(r["precision"], int(r["problem"].split("K=")[1])))
               for r in got)
    ours = [r for r in got if r["step"] != ""]
    assert all(r["pct_vendor"] and r["vendor"] == "cublas" for r in ours)
    assert all(r["speedup"] and r["speedup_over"] == "naive" for r in ours)
    assert all(float(r["gpu_ms"]) > 0 and r["gpu"] for r in got)
    assert outcome.compile.kernels == 7 and outcome.restarts == 0
    best = [r for r in outcome.summary.rows() if r.get("best")]
    assert len(best) == 2 and all(r["variant"] != "naive" for r in best)


def test_planted_fault_and_hang_are_recorded_and_survived(tmp_path):
    cfg = tmp_path / "s.yaml"
    cfg.write_text(SMALL)
    spec = config.load_sweep(cfg)
    planted = Variant("gemm", "planted", 99, "planted failures", str(PLANTED),
                      params=(Param("MODE", 1, (1, 2), "1 illegal address, 2 hang"),), block="(32,)", grid="(1,)")
    naive, tiled = spec.cases[0], next(c for c in spec.cases if c.variant.name == "tiled").variant
    cases = [naive, Case(planted, (("MODE", 1),)), Case(tiled, (("TS", 32),)),
             Case(planted, (("MODE", 2),)), Case(tiled, (("TS", 8),))]
    spec = replace(spec, cases=cases, shapes=[gemm.Shape(64, 64, 64)], vendor=False, watchdog_s=10.0)
    out = tmp_path / "r.csv"
    outcome = sweep.execute(spec, sweep.RunOptions("cuda", out))
    got = {(r["variant"], r["params"]): r for r in rows(out)}
    assert len(got) == 5
    fault = got["planted", "MODE=1"]
    assert fault["status"] == "ERROR" and "illegal" in fault["error"].lower(), fault["error"]
    hang = got["planted", "MODE=2"]
    assert hang["status"] == "ERROR" and hang["error"].startswith("watchdog"), hang["error"]
    for key in (("naive", ""), ("tiled", "TS=32"), ("tiled", "TS=8")):
        assert got[key]["status"] == "PASS", got[key]
    assert outcome.restarts == 2 and outcome.failed == 2


def test_device_rel_err_matches_numpy(cuda_backend):
    rng = np.random.default_rng(5)
    ref = rng.standard_normal((300, 77))
    out = (ref + 1e-4 * rng.standard_normal(ref.shape)).astype(np.float32)
    d_out, d_ref = cuda_backend.upload(out), cuda_backend.upload(ref)
    assert cuda_backend.rel_err(d_out, d_ref, out.size) == pytest.approx(measure.rel_err(out, ref), rel=1e-9)
    out[7, 3] = np.nan
    cuda_backend.write(d_out, out)
    assert cuda_backend.rel_err(d_out, d_ref, out.size) == float("inf")


def test_host_delay_inside_a_sample_is_not_timed(cuda_backend):
    """The blocking kernel holds the stream until the whole batch is queued: a 20 ms host stall
    between the events of a sample must not show up in the measured time."""
    import time
    assert max(cuda_backend.timed_samples(lambda: time.sleep(0.02), 1, 3)) < 1.0
    assert max(cuda_backend.timed_samples(lambda: None, 5, 10)) < 1.0  # the flag is re-armed


def test_a_launch_that_synchronizes_falls_back_to_unblocked_timing(cuda_backend):
    """A launch that waits for the stream would wait for the blocking kernel: the kernel gives up
    after its timeout, those samples are thrown away, and that launch is never blocked again."""
    def syncing():
        cuda_backend.synchronize()

    assert len(cuda_backend.timed_samples(syncing, 1, 3)) == 3
    assert id(syncing) in cuda_backend._syncing
    assert len(cuda_backend.timed_samples(syncing, 1, 3)) == 3


def test_a_launch_of_many_kernels_at_long_samples_is_queued_in_smaller_batches_not_issued_by_the_host(cuda_backend):
    """The unroll convolutions queue several kernels a launch: at 0.5 ms samples their batches filled the driver's
    queue, the blocking kernel timed out and they were timed host-issued (15-19% between runs on the H100,
    lab/journal/measurement.md). A full queue is told from a launch that synchronizes by one launch queued
    alone: the batches shrink to fit, and the samples stay queued."""
    from nnbench.runtime.compile import CompileRequest, compile_cubin

    comp = compile_cubin(CompileRequest.make(Path(__file__).parent / "kernels/user/fma_chain.cu", {"ITERS": 8},
                                             cuda_backend.arch))
    x = cuda_backend.upload(np.ones(256, np.float32))
    y = cuda_backend.upload(np.zeros(256, np.float32))
    one = cuda_backend.bind(cuda_backend.load(comp, "fma_chain"), (1, 1, 1), (256, 1, 1),
                            (cuda_backend.ptr(x), cuda_backend.ptr(y), np.int32(256)), "PPi")

    def sixteen():  # 16 kernels a launch: 0.5 ms samples of 10 launches at least, 160+ launches a batch
        for _ in range(16):
            one()

    s = measure.measure(cuda_backend, sixteen, measure.TimingSettings(min_sample_ms=0.5, budget_s=0.5))
    assert cuda_backend.queue_room(sixteen) < measure.MAX_QUEUED  # the queue did fill (else raise the kernel count)
    assert not cuda_backend.issued_by_host(sixteen) and s.timing in (measure.HOT_BATCHED, measure.HOT_SINGLE)
    assert s.reps * s.median_ms >= 0.5 * 0.9 and s.samples >= 10
    # a launch that synchronizes inside is still told apart, with a full batch or a single launch
    assert len(cuda_backend.timed_samples(lambda: cuda_backend.synchronize(), 4, 3)) == 3


def test_a_worker_is_ready_with_its_helper_kernels_before_the_first_job(tmp_path, monkeypatch):
    """The verifier and the blocking kernel are compiled (cold cache) and loaded while the parent
    compiles, not inside the first case's run (about a second of nvcc on the H100 host)."""
    from nnbench import paths
    from nnbench.runtime.compile import CompileRequest, compile_cubin
    from nnbench.sweeps.worker import Worker

    monkeypatch.setenv("NNBENCH_CACHE", str(tmp_path / "cubins"))
    w = Worker("cuda", "gemm", measure.TimingSettings(), gemm.DEFAULT_RTOL, 3, {}, first=gemm.Shape(64, 64, 64))
    try:
        assert w.run("load", [], 60)["modules"] == 0  # no job yet: its answer comes after "ready"
        assert w.ready is not None and w.ready["helpers_s"] <= w.ready["first_problem_s"]
        arch = w.info["arch"]
    finally:
        w.close()
    for source in ("common/verify.cu", "common/blocking.cu"):
        assert compile_cubin(CompileRequest.make(paths.KERNELS / source, {}, arch)).cached, source
