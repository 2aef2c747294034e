"""A sweep's device memory is checked at its plan, not when a case runs: the largest problem's estimate against
the free memory the worker's device reports, before any case runs or any file is made; `--dry-run` shows it."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from nnbench import memory
from nnbench.cli import cli
from nnbench.errors import NnbenchError
from nnbench.runtime.cpu import CpuBackend
from nnbench.sweeps import config, sweep, worker

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "gemm_sweep.yaml"  # largest shape 4096^3: 768 MiB of device memory by its estimate
SMALL = 64 << 20


def _largest():
    spec = config.load_config(CONFIG)[0]
    problem, host, device = memory.largest(spec.workload, spec.shapes)
    return spec, problem, device


class SmallGpu(CpuBackend):
    """A stand-in device with 64 MiB free."""

    def free_memory(self) -> int:
        return SMALL


class StartedWorker:
    """What sweep.execute sees of a worker that started on a GPU with 64 MiB free; it runs nothing."""

    pid = 0
    jobs: list = []

    def __init__(self, *args, **kw) -> None:
        self.info = {"env": {"backend": "cuda", "gpu": "Stand-in GPU"}, "device": None, "arch": "sm_90",
                     "free_memory": SMALL}

    def run(self, *args, **kw):
        StartedWorker.jobs.append(args)
        raise AssertionError("a case ran")

    def close(self) -> None:
        pass


def test_the_worker_reports_its_devices_free_memory(monkeypatch):
    sent = []

    class Pipe:
        def send(self, msg):
            sent.append(msg)

        def recv(self):
            raise EOFError  # the parent is gone once the worker has said hello and is ready

    monkeypatch.setattr("nnbench.runtime.open_backend", lambda name: (SmallGpu(), None))
    spec = config.load_config(CONFIG)[0]
    with pytest.raises(EOFError):
        worker.serve(Pipe(), "cpu", spec.workload_name, spec.settings, spec.rtol, 0, {})
    assert sent[0][0] == "hello" and sent[0][1]["free_memory"] == SMALL


def test_a_sweep_whose_largest_shape_does_not_fit_the_free_memory_is_refused_before_any_case(tmp_path, monkeypatch):
    spec, problem, need = _largest()
    assert need > SMALL
    monkeypatch.setattr(sweep, "Worker", StartedWorker)
    out = tmp_path / "run.csv"
    with pytest.raises(NnbenchError) as e:
        sweep.execute(spec, sweep.RunOptions(backend="cuda", out=out))
    text = str(e.value)
    assert str(CONFIG) in text and f"shape {problem.label}" in text and "Stand-in GPU" in text
    assert f"{need:,.0f} bytes" in text and f"{SMALL:,} bytes" in text, text
    assert not out.exists() and StartedWorker.jobs == []


def test_the_cli_refuses_it_in_one_line_with_exit_2(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep, "Worker", StartedWorker)
    monkeypatch.setattr("nnbench.cli.app.worker_backend", lambda backend: "cuda")
    res = CliRunner().invoke(cli, ["sweep", str(CONFIG), "--out", str(tmp_path / "run.csv")])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert lines[-1].startswith("nnbench: error:") and "of GPU memory and 64.0 MiB" in lines[-1], res.output
    assert not any("Traceback" in ln for ln in lines) and not (tmp_path / "run.csv").exists()


def test_a_device_with_room_or_unknown_free_memory_is_not_refused():
    spec, problem, need = _largest()
    sweep.require_memory(spec, None, "cpu")  # the CPU backend: host memory, checked when the config was read
    sweep.require_memory(spec, int(need / memory.HEADROOM) + 1, "a GPU with room")


def test_the_dry_run_shows_the_largest_shapes_estimate():
    spec, problem, need = _largest()
    res = CliRunner().invoke(cli, ["sweep", str(CONFIG), "--dry-run"])
    assert res.exit_code == 0, res.output
    assert f"memory: largest shape {problem.label}: about {memory.readable(need)} of GPU memory" in res.output


@pytest.mark.gpu
def test_on_a_gpu_a_sweep_that_cannot_fit_what_is_free_is_refused_before_any_case(tmp_path):
    """The real device: this process holds all but 4 GiB of it (the worker's own context needs some), so the
    worker's mem_get_info reports less than a 16384^3 GEMM's 12 GiB estimate; the sweep is refused with the
    figures and leaves no file."""
    import pycuda.driver as drv
    drv.init()
    ctx = drv.Device(0).retain_primary_context()  # the one later GPU tests of this process share
    ctx.push()
    cfg = tmp_path / "big.yaml"
    cfg.write_text("name: big\nworkload: gemm\nshapes: [[16384, 16384, 16384]]\nvariants: {tiled: {axes: {ts: 32}}}\n")
    free, _ = drv.mem_get_info()
    hog = drv.mem_alloc(max(1, free - (4 << 30)))
    try:
        res = CliRunner().invoke(cli, ["sweep", str(cfg), "--out", str(tmp_path / "run.csv"), "--backend", "cuda"])
    finally:
        hog.free()
        ctx.pop()
    assert res.exit_code == 2, res.output
    assert "shape 16384×16384×16384" in res.output and "of GPU memory and" in res.output, res.output
    assert not (tmp_path / "run.csv").exists()
