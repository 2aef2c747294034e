"""What a sweep pays per case outside its kernels, on the host (issue 30's overhead targets): reads that
cost milliseconds on the H100 happen once per process, not once per `measure` call; and `--gpus 1`
starts the very worker a plain sweep starts, so the two can differ only by chance."""

import pytest

from nnbench.cli import app
from nnbench.cli import sweep as cli_sweep
from nnbench.runtime import nvml
from nnbench.sweeps import config, sweep


class _FakeNvml:
    """pynvml's surface that `Nvml` and `Telemetry` touch, counting the maximum-clock reads."""

    NVMLError = RuntimeError

    def __init__(self) -> None:
        self.max_reads = 0

    def nvmlDeviceGetHandleByPciBusId(self, bus):
        return "handle"

    def nvmlDeviceGetMaxClockInfo(self, handle, which):
        self.max_reads += 1  # 1.7 ms a read on an H100
        return 1980


def test_the_maximum_clock_is_read_once_per_gpu_not_per_measure_call(monkeypatch):
    fake = _FakeNvml()
    monkeypatch.setattr(nvml, "pynvml", fake)
    monkeypatch.setattr(nvml, "_init", lambda: True)
    gpu = nvml.Nvml("00000000:19:00.0")
    telemetries = [gpu.telemetry() for _ in range(5)]  # one per measure call, i.e. per case
    assert all(t.max_sm_mhz == 1980.0 for t in telemetries)
    assert fake.max_reads == 1


# -- `--gpus 1` against a plain sweep --------------------------------------------------------------
SPACE = """
name: paths
suite: gemm
baseline: numpy
seed: 5
shapes:
  - [33, 17, 9]
  - [5, 7, 3]
timing: {budget: 0.25, min_samples: 7, max_noise: 0.02, watchdog: 30}
variants:
  numpy:
  tiled:
    axes: {ts: [8, 16]}
"""


class _RecordingWorker:
    """Stands in for nnbench.sweeps.worker.Worker in the parent: keeps what each worker was started with and
    every job sent to it, and answers each job with a PASS record (no process, no GPU)."""

    log: list = []

    def __init__(self, backend_name, suite, settings, rtol, seed, env_extra, first=None, share=1) -> None:
        self.log.append(("start", backend_name, suite, settings, rtol, seed, env_extra,
                         getattr(first, "label", first), share))
        self.pid, self.spawned, self.ready, self._next = 4242, 0.0, None, 0
        self.info = {"env": {"backend": "cpu", "gpu": "fake"}, "device": None, "arch": None}

    def submit(self, kind, job) -> int:
        case = job.case if job.kind == "vendor" else f"{job.case.variant.name} {job.case.param_label}"
        self.log.append((kind, job.kind, case, job.shape.label, getattr(job.next_shape, "label", None), job.compiled))
        self._next += 1
        return self._next

    def wait(self, job_id, watchdog_s, on_progress=None) -> dict:
        return {"status": "PASS", "median_ms": 1.0, "gpu_ms": 9.0, "wall_ms": 10.0, "samples": 7}

    def run(self, kind, job, watchdog_s, on_progress=None) -> dict:
        return self.wait(self.submit(kind, job), watchdog_s)

    def close(self) -> None:
        self.log.append(("close",))

    kill = close


def _started(monkeypatch, tmp_path, backend, gpus, name) -> list:
    monkeypatch.setattr(sweep, "Worker", _RecordingWorker)
    _RecordingWorker.log = []
    cfg = tmp_path / "paths.yaml"
    cfg.write_text(SPACE)
    sweep.execute(config.load_sweep(cfg), sweep.RunOptions(backend, tmp_path / f"{name}.csv",
                                                           gpus=tuple(gpus or ())))
    return _RecordingWorker.log


def test_gpus_1_starts_the_very_worker_a_plain_sweep_starts(monkeypatch, tmp_path):
    """The parent's side of both paths, recorded: the same worker (backend name, suite, timing
    settings, tolerance, seed, first problem, share of the host's cores) and the same jobs in the same
    order. Sessions 3-5 measured `--gpus 1` drawing more samples than a plain sweep in 8 pairs of 8
    with the kernels no slower (lab/journal/sweep.md); the one argument that differed was the
    backend name (`cuda:0` against `cuda`)."""
    plain = _started(monkeypatch, tmp_path, "cuda", None, "plain")
    assert plain[0][0] == "start" and plain[0][1] == "cuda" and plain[0][-1] == 1
    assert sum(e[0] == "run" for e in plain) == 2  # numpy at both shapes; tiled is a CUDA kernel: SKIP rows
    assert _started(monkeypatch, tmp_path, "cuda", [0], "gpus1") == plain
    on_two = _started(monkeypatch, tmp_path, "cuda:2", None, "plain2")
    assert on_two[0][1] == "cuda:2" and _started(monkeypatch, tmp_path, "cuda:2", [2], "gpus1_2") == on_two


def test_a_worker_on_another_gpu_names_it():
    assert [sweep.pinned("cuda", g) for g in (0, 1)] == ["cuda", "cuda:1"]
    assert [sweep.pinned("cuda:2", g) for g in (2, 0)] == ["cuda:2", "cuda:0"]


def test_gpus_1_leaves_cuda_to_the_worker_as_a_plain_sweep_does(monkeypatch):
    """The CLI's `--gpus 1` resolves to the plain sweep's own GPU without counting GPUs, which would
    initialise CUDA in the parent (a plain sweep's parent never does); more GPUs are counted."""
    import nnbench.runtime
    from nnbench.sweeps import worker

    def count():
        raise AssertionError("the parent initialised CUDA to count GPUs")

    monkeypatch.setattr(nnbench.runtime, "device_count", count)
    monkeypatch.setattr(worker, "count_gpus", count)
    monkeypatch.setattr(app, "DEVICE", [0])
    assert cli_sweep._gpus("1", "cuda") == [0]
    monkeypatch.setattr(app, "DEVICE", [3])
    assert cli_sweep._gpus("1", "auto") == [3]
    monkeypatch.setattr(worker, "count_gpus", lambda: 4)
    monkeypatch.setattr(app, "DEVICE", [0])
    assert cli_sweep._gpus("2", "cuda") == [0, 1] and cli_sweep._gpus("all", "cuda") == [0, 1, 2, 3]


def test_gpus_n_counts_the_gpus_in_a_child_not_in_the_parent(monkeypatch):
    """`--gpus 2` and `--gpus all` count in a child interpreter (nnbench.sweeps.worker.count_gpus), so the
    parent never initialises CUDA on any path; the child sees the parent's CUDA_VISIBLE_DEVICES (none
    here: 0 GPUs on any machine). A child that fails is one line."""
    import sys

    import nnbench.runtime
    from nnbench.errors import NnbenchError

    def count():
        raise AssertionError("the parent initialised CUDA to count GPUs")

    monkeypatch.setattr(nnbench.runtime, "device_count", count)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setattr(app, "DEVICE", [0])
    for text in ("2", "all"):
        with pytest.raises(NnbenchError, match=f"^--gpus {text}: this machine has no CUDA GPU"):
            cli_sweep._gpus(text, "cuda")
    monkeypatch.setattr(sys, "executable", "/bin/false")
    with pytest.raises(NnbenchError, match=r"^counting the CUDA GPUs failed \(exit 1\): no output$"):
        cli_sweep._gpus("2", "cuda")
