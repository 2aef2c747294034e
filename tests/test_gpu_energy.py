"""On the GPU: energy measured on NVML's counter (nnbench/runtime/energy.py, docs/ENERGY.md). cuBLAS FP32 and TF32 at
4096^3 draw different power, so their joules per launch differ as power x time does; each window's joules agree
with the counter read by pynvml directly around the same window within 5%, and with nvidia-smi's log of the
instantaneous power over the window's span within the tolerance its sampling sets (nnbench/runtime/smi_log.py).

NNBENCH_TEST_SMI_LOG=<path> keeps nvidia-smi's log there (docs/ENERGY.md's figures come from it)."""

import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from nnbench import measure
from nnbench.runtime import energy, smi_log

pytestmark = pytest.mark.gpu
SIZE = 4096
SMI_PERIOD_MS = 25  # 40 lines in a 1 s window; the tolerance grows with the period (smi_log.tolerance_j)


def smi_fields(bus: str) -> tuple[tuple[str, ...] | None, str | None]:
    """The fields to log on this driver: the instantaneous power, with the 1 s average beside it where it exists;
    None and why where nvidia-smi has no instantaneous power."""
    def answers(fields):
        out = subprocess.run(["nvidia-smi", "-i", bus, f"--query-gpu={','.join(fields)}",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30)
        cells = [c.strip() for c in out.stdout.strip().split(",")]
        return out.returncode == 0 and len(cells) == len(fields) and all(_number(c) for c in cells)
    for fields in ((smi_log.FIELD, smi_log.AVERAGE_FIELD), (smi_log.FIELD,)):
        if answers(fields):
            return fields, None
    return None, (f"nvidia-smi on this driver has no {smi_log.FIELD}; power.draw is a 1 s average on Ampere and "
                  "newer, which lags a 1 s window by up to its length (docs/ENERGY.md)")


def _number(cell: str) -> bool:
    try:
        float(cell)
        return True
    except ValueError:
        return False


@pytest.fixture(scope="module")
def windows(cuda_backend):
    """Both cuBLAS rows measured with --energy, with pynvml's counter read around each window and nvidia-smi
    logging the power meanwhile: (rows by tf32, pynvml's joules per window, each window's span in seconds since
    the epoch, the log's text or None, why there is no log)."""
    pynvml = pytest.importorskip("pynvml")
    from nnbench.runtime.vendor import Cublas
    be = cuda_backend
    cublas = Cublas(be)
    if cublas.via != "cupy":
        pytest.skip(f"cuBLAS TF32 needs CuPy ({cublas.reason or cublas.via})")
    rng = np.random.default_rng(0)
    a, b = (be.upload(rng.standard_normal((SIZE, SIZE)).astype(np.float32)) for _ in range(2))
    c = be.upload(np.zeros((SIZE, SIZE), dtype=np.float32))
    shape = type("Shape", (), {"M": SIZE, "N": SIZE, "K": SIZE})
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByPciBusId(be.nvml.bus)
    outside: list[float] = []  # the counter's joules, read by pynvml right before and after each window
    spans: list[tuple[float, float]] = []
    window = energy.window

    def watched(*args, **kwargs):
        e0 = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        got = window(*args, **kwargs)
        outside.append((pynvml.nvmlDeviceGetTotalEnergyConsumption(handle) - e0) / 1e3)
        # The window's span is on time.perf_counter; nvidia-smi stamps its lines with the wall clock.
        to_wall = time.time() - time.perf_counter()
        if got.opened_at is not None and got.window_s is not None:
            spans.append((got.opened_at + to_wall, got.opened_at + got.window_s + to_wall))
        return got

    no_log = None
    fields = None
    if shutil.which("nvidia-smi") is None:
        no_log = "nvidia-smi is not on PATH"
    else:
        fields, no_log = smi_fields(be.nvml.bus)
    text = None
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        mp.setattr(energy, "window", watched)
        settings = replace(measure.TimingSettings(budget_s=0.5), energy=True)
        log_path = Path(tmp) / "smi.csv"
        logger = None
        if fields:
            # Line-buffered where coreutils' stdbuf is there, so that no line waits in a buffer when it stops.
            line_buffered = ["stdbuf", "-oL"] if shutil.which("stdbuf") else []
            with open(log_path, "w") as sink:
                logger = subprocess.Popen(line_buffered + smi_log.command(be.nvml.bus, SMI_PERIOD_MS, fields),
                                          stdout=sink, stderr=subprocess.DEVNULL)
            time.sleep(1.0)  # lines before the first window: each edge needs one on either side
        rows = {}
        try:
            for tf32 in (False, True):
                launch = cublas.launcher(shape, be.ptr(a), be.ptr(b), be.ptr(c), 1.0, 0.0, tf32=tf32)
                rows[tf32] = measure.measure(be, launch, settings)
        finally:
            if logger is not None:
                time.sleep(0.5)
                logger.send_signal(signal.SIGINT)  # nvidia-smi's own way out of -lms: its lines are flushed
                try:
                    logger.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    logger.kill()
                    logger.wait()
                text = log_path.read_text()
                if os.environ.get("NNBENCH_TEST_SMI_LOG"):
                    Path(os.environ["NNBENCH_TEST_SMI_LOG"]).write_text(
                        f"# timestamp,{','.join(fields)}; windows (epoch s): {spans}\n{text}")
    return rows, outside, spans, text, fields, no_log


def test_cublas_fp32_and_tf32_energy_follows_their_power_and_an_independent_reading(windows):
    rows, outside, _, _, _, _ = windows
    for tf32, st in rows.items():
        assert st.energy_method == "counter" and st.energy_note is None, (tf32, st.energy_note)
        assert st.energy_window_ms >= 1e3 * energy.MIN_WINDOW_S
        assert 50 < st.power_w < 1500
    fp32, tf32 = rows[False], rows[True]
    assert abs(fp32.power_w - tf32.power_w) > 0.5, (fp32.power_w, tf32.power_w)  # not one reading copied twice
    # Joules per launch follow power x time: FP32's launch costs several times TF32's. Not to 5% against the timed
    # median: a window of >= 1 s of back-to-back launches runs under the power cap longer than the timed samples
    # (on the H100 at b883f07, 2026-11-28: 6.19 against power x median's 7.18), so each launch's energy is held to
    # its own median's power x time within a factor that a clock change under sustained load stays inside.
    assert fp32.energy_j > 3 * tf32.energy_j, (fp32.energy_j, tf32.energy_j)
    for st in (fp32, tf32):
        assert 0.6 < st.energy_j / (st.power_w * st.median_ms * 1e-3) < 1.6, (st.energy_j, st.power_w, st.median_ms)
    # The independent reading spans the window plus its opening wait (under 0.1 s at idle power).
    for st, joules in zip(rows.values(), outside):
        assert st.energy_window_j == pytest.approx(joules, rel=0.05), (st.energy_window_j, joules)


def test_each_windows_joules_agree_with_nvidia_smis_power_log_of_the_same_span(windows):
    rows, _, spans, text, fields, no_log = windows
    if no_log:
        pytest.skip(no_log)
    assert len(spans) == len(rows)  # one span per window, in the rows' order
    samples = smi_log.parse(text)
    averaged = smi_log.parse(text, column=2) if smi_log.AVERAGE_FIELD in fields else []
    checks = []
    for (tf32, st), (start, end) in zip(rows.items(), spans):
        got = smi_log.check(st.energy_window_j, start, end, samples)
        avg_j = smi_log.joules(averaged, start, end) if averaged else None
        print(f"cuBLAS {'TF32' if tf32 else 'FP32'} 4096^3, window {end - start:.3f} s, {st.power_w:.1f} W: "
              f"{got.line()}; {smi_log.AVERAGE_FIELD}: {'-' if avg_j is None else f'{avg_j:.1f} J'}")
        checks.append(got)
    for got in checks:
        assert got.reason is None, got.line()
        assert got.ok, got.line()
