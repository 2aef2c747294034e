"""Sharded sweeps start fast: the workers are started once, each slot takes its first job as soon as its
own worker is ready (not once every worker is), and every worker builds, while it starts, the problem it
will run first (the largest with several workers, as longest_first hands them out)."""

import threading
import time

from nnbench.sweeps import config, sweep
from nnbench.sweeps.pool import WorkerPool

from .test_sweep_overhead import SPACE, _RecordingWorker


class _SlotWorker:
    """A worker answering at once; `log` keeps (slot, when) per job answered."""

    def __init__(self, slot: int, log: list) -> None:
        self.slot, self.log, self.pid, self._n = slot, log, 100 + slot, 0

    def submit(self, kind, job) -> int:
        self._n += 1
        return self._n

    def wait(self, job_id, watchdog_s, on_progress=None) -> dict:
        self.log.append((self.slot, time.perf_counter()))
        time.sleep(0.01)
        return {"status": "PASS"}

    def close(self) -> None:
        pass

    kill = close


def test_a_slot_runs_while_another_slots_worker_still_starts():
    answered, made = [], []
    slow_ready = threading.Event()

    def make(slot):
        made.append(slot)
        if slot == 1:
            time.sleep(0.3)  # a GPU whose worker takes long to start
            slow_ready.set()
        return _SlotWorker(slot, answered)

    pool = WorkerPool(make, 2, watchdog_s=10, first=_SlotWorker(0, answered))
    pool.start()
    t0 = time.perf_counter()
    jobs = [object() for _ in range(40)]
    got = list(pool.run(jobs))
    assert len(got) == 40 and all(rec == {"status": "PASS"} for _, rec in got)
    assert sorted(made) == [1]  # slot 1's worker made once: its slot waited for it rather than start another
    assert answered[0][0] == 0 and answered[0][1] - t0 < 0.2  # slot 0 did not wait for slot 1
    assert {slot for slot, _ in answered} == {0, 1}


def test_the_first_problem_every_worker_builds(tmp_path):
    spec = config.load_sweep(_space_file(tmp_path))
    labels = {sweep.first_problem(spec, n, searching).label for n, searching in ((1, False), (2, True))}
    assert labels == {"5×7×3"}  # alone, or a search: the plan's smallest first
    assert sweep.first_problem(spec, 2, False).label == "33×17×9"  # several: longest_first's largest


def test_every_worker_of_a_sharded_sweep_builds_its_first_problem_while_it_starts(monkeypatch, tmp_path):
    monkeypatch.setattr(sweep, "Worker", _RecordingWorker)
    _RecordingWorker.log = []
    sweep.execute(config.load_sweep(_space_file(tmp_path)), sweep.RunOptions("cpu", tmp_path / "r.csv", gpus=(0, 1)))
    starts = [e for e in _RecordingWorker.log if e[0] == "start"]
    assert len(starts) == 2 and [e[7] for e in starts] == ["33×17×9", "33×17×9"]


def _space_file(folder):
    path = folder / "paths.yaml"
    path.write_text(SPACE)
    return path


def test_the_longest_expected_case_goes_first_on_the_roofline():
    from types import SimpleNamespace

    from nnbench.sweeps.worker import Job
    compute = SimpleNamespace(flops=1e9, bytes=1e6)  # 20 us at 50 TFLOP/s
    memory = SimpleNamespace(flops=1e8, bytes=1e9)  # 333 us at 3,000 GB/s
    jobs = [Job("case", compute, "c"), Job("case", memory, "m")]
    h100 = {"fp32_peak_tflops": 50.0, "dram_peak_gbs": 3000.0}
    assert [j.case for j in sweep.longest_first(jobs, h100)] == ["m", "c"]
    assert [j.case for j in sweep.longest_first(jobs)] == ["c", "m"]  # no peaks (the CPU backend): FLOPs
    assert sweep.expected_s(memory, h100) == 1e9 / 3e12 and sweep.expected_s(compute, h100) == 1e9 / 5e13
