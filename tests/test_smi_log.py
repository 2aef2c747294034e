"""An energy window checked against nvidia-smi's power log (nnbench/runtime/smi_log.py, docs/ENERGY.md), on
synthetic logs: a board that idles, runs a case for a window, idles again, seen through a sensor that refreshes
every 100 ms and a logger that prints it every 25 ms with millisecond timestamps, as nvidia-smi does."""

from __future__ import annotations

from datetime import datetime

import pytest

from nnbench.runtime import smi_log

T0 = 1_795_000_000.0  # seconds since the epoch, where the window opens
IDLE_W = 90.0


def board(busy_w: float, window_s: float, idle_w: float = IDLE_W):
    """The board's power at time t: `busy_w` inside [T0, T0 + window_s], idle elsewhere."""
    return lambda t: busy_w if T0 <= t <= T0 + window_s else idle_w


def sensor(power, refresh_s: float = 0.1, phase_s: float = 0.0, average_s: float | None = None):
    """What NVML reports at t: the board's mean power over `average_s` (the refresh period for the instantaneous
    field, a second for power.draw on Ampere and newer) up to the sensor's last refresh."""
    average_s = average_s or refresh_s

    def read(t: float) -> float:
        last = T0 + phase_s + refresh_s * ((t - T0 - phase_s) // refresh_s)
        n = 200
        return sum(power(last - average_s * (i + 0.5) / n) for i in range(n)) / n
    return read


def log(read, period_s: float = 0.025, start: float = T0 - 2.0, end: float = T0 + 3.5) -> str:
    """nvidia-smi's CSV: 'YYYY/MM/DD HH:MM:SS.mmm, W' in local time, every `period_s` (each line 1 ms late at
    most, as a loop on a busy host is)."""
    lines, t, k = [], start, 0
    while t < end:
        stamp = datetime.fromtimestamp(t).strftime(smi_log.TIMESTAMP)[:-3]
        lines.append(f"{stamp}, {read(t):.2f}")
        k += 1
        t = start + k * period_s + 0.001 * ((k * 7) % 3) / 2
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("window_s", [1.0, 1.37, 2.2])
@pytest.mark.parametrize("busy_w", [450.0, 690.0])
@pytest.mark.parametrize("phase_s", [0.0, 0.04, 0.09])  # where the sensor's refresh falls against the window
def test_an_instantaneous_log_of_the_same_window_agrees_with_the_counter(window_s, busy_w, phase_s):
    samples = smi_log.parse(log(sensor(board(busy_w, window_s), phase_s=phase_s)))
    got = smi_log.check(busy_w * window_s, T0, T0 + window_s, samples)
    assert got.reason is None and got.ok, got.line()
    assert got.samples == pytest.approx(window_s / 0.025, abs=2)
    assert got.period_s == pytest.approx(0.025, abs=0.002)
    assert got.step_w == pytest.approx(busy_w - IDLE_W)


def test_the_joules_are_the_trapezoid_with_the_edges_interpolated():
    samples = [(T0 - 0.5, 100.0), (T0 + 0.5, 300.0), (T0 + 1.5, 300.0)]
    # 100 -> 300 W linear over [T0 - 0.5, T0 + 0.5]: 200 W at T0, 250 W at T0 + 0.25
    assert smi_log.joules(samples, T0, T0 + 1.0) == pytest.approx(0.5 * (200 + 300) / 2 + 0.5 * 300)
    assert smi_log.joules(samples, T0 + 0.25, T0 + 0.75) == pytest.approx(0.25 * (250 + 300) / 2 + 0.25 * 300)
    assert smi_log.joules(samples, T0 - 1.0, T0) is None  # the log starts after the window does
    assert smi_log.joules(samples, T0, T0 + 2.0) is None


def test_a_counter_read_over_another_window_fails_the_check():
    # Planted defect: the FP32 window's joules (450 W) against the TF32 window's log (690 W), as a swapped or
    # mis-dated window would give.
    window_s = 1.1
    samples = smi_log.parse(log(sensor(board(690.0, window_s))))
    got = smi_log.check(450.0 * window_s, T0, T0 + window_s, samples)
    assert got.reason is None and not got.ok, got.line()
    right = smi_log.check(690.0 * window_s, T0, T0 + window_s, samples)
    assert right.ok, right.line()


def test_counter_joules_off_by_the_tolerance_fail_and_inside_it_pass():
    window_s = 1.2
    samples = smi_log.parse(log(sensor(board(600.0, window_s))))
    got = smi_log.check(600.0 * window_s, T0, T0 + window_s, samples)
    assert got.ok
    for sign in (1, -1):
        assert not smi_log.check(got.smi_j + sign * 1.01 * got.tolerance_j, T0, T0 + window_s, samples).ok
        assert smi_log.check(got.smi_j + sign * 0.99 * got.tolerance_j, T0, T0 + window_s, samples).ok
    assert got.tolerance_j == pytest.approx(smi_log.SENSOR_REL * got.smi_j + (600 - IDLE_W) * (0.1 + 0.025), rel=0.02)


def test_power_draw_averaged_over_a_second_does_not_agree_with_a_one_second_window():
    # Why the check reads power.draw.instant: the one-second average lags the window's whole ramp from idle.
    window_s = 1.0
    samples = smi_log.parse(log(sensor(board(600.0, window_s), average_s=1.0)))
    got = smi_log.check(600.0 * window_s, T0, T0 + window_s, samples)
    assert got.reason is None and not got.ok and got.rel > 0.3, got.line()


def test_a_log_that_misses_the_window_gives_a_reason_not_a_verdict():
    window_s = 1.0
    text = log(sensor(board(600.0, window_s)))
    short = smi_log.check(600.0, T0, T0 + window_s, smi_log.parse(log(sensor(board(600.0, window_s)),
                                                                      end=T0 + 0.05)))
    assert short.reason.startswith("2 log lines in the window") and not short.ok
    sparse = smi_log.check(1200.0, T0, T0 + 2.0, smi_log.parse(log(sensor(board(600.0, 2.0)), period_s=0.3)))
    assert sparse.reason.startswith("log period 300 ms") and not sparse.ok
    late = [s for s in smi_log.parse(text) if s[0] > T0 + 0.01]  # the logger started after the window opened
    assert smi_log.check(600.0, T0, T0 + window_s, late).reason == "the log does not cover the window's start and end"


def test_the_parser_reads_nvidia_smis_lines_and_leaves_out_what_is_no_reading():
    stamp = datetime.fromtimestamp(T0).strftime(smi_log.TIMESTAMP)[:-3]
    text = (f"{stamp}, 612.47, 480.10\n"
            f"{stamp[:-3]}250, [N/A], 481.00\n"
            f"{stamp[:-3]}500, 615.00, [N/A]\n"
            f"{stamp[:-3]}7")  # the partial line a stopped logger leaves
    assert smi_log.parse(text) == [(pytest.approx(T0), 612.47), (pytest.approx(T0 + 0.5), 615.0)]
    assert [w for _, w in smi_log.parse(text, column=2)] == [480.10, 481.0]
    assert smi_log.command("00000000:19:00.0", 25) == [
        "nvidia-smi", "-i", "00000000:19:00.0", "--query-gpu=timestamp,power.draw.instant",
        "--format=csv,noheader,nounits", "-lms", "25"]
