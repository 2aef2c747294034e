"""Energy is measured on NVML's energy counter over windows of a second or more, or not at all
(nnbench/runtime/energy.py, docs/ENERGY.md). A fake NVML on a simulated clock: a counter that steps every 100 ms,
one that does not exist, one that does not move, a window too short."""

from __future__ import annotations

import math
import time

import pytest

from nnbench import measure
from nnbench.runtime import energy
from nnbench.runtime.cpu import CpuBackend
from nnbench.runtime.nvml import Probe, Telemetry

STEP_S = 0.1  # NVML's counter on the H100 moves this often


class Clock:
    """Simulated time: a launch runs for `launch_s`, a counter read costs `read_s` (3.6 ms on the H100)."""

    def __init__(self, t0: float = 0.05, read_s: float = 0.0036) -> None:
        self.t, self.read_s = t0, read_s

    def now(self) -> float:
        return self.t

    def sleep(self, dt: float) -> None:
        self.t += dt


class Board:
    """A GPU drawing `busy_w` while a launch runs and `idle_w` otherwise; its counter accumulates every joule but
    shows it only at each STEP_S boundary, as NVML's does."""

    def __init__(self, clock: Clock, busy_w: float = 300.0, idle_w: float = 60.0, launch_s: float = 0.005) -> None:
        self.clock, self.busy_w, self.idle_w, self.launch_s = clock, busy_w, idle_w, launch_s
        self.joules = 0.0
        self.shown_mj, self.shown_at = 0, 0.0  # the counter's last step

    def _advance(self, dt: float, watts: float) -> None:
        t = self.clock.t
        while dt > 0:  # split at step boundaries so each step shows the joules up to it
            boundary = (math.floor(t / STEP_S + 1e-12) + 1) * STEP_S
            d = min(dt, boundary - t)
            self.joules += watts * d
            t += d
            dt -= d
            if abs(t - boundary) < 1e-12:
                self.shown_mj = int(self.joules * 1e3)
        self.clock.t = t

    def launch(self) -> None:
        self._advance(self.launch_s, self.busy_w)

    def counter(self) -> int:
        self._advance(self.clock.read_s, self.idle_w)
        return self.shown_mj


@pytest.mark.parametrize("t0", [0.0, 0.03, 0.06, 0.09])  # where in the counter's step the window is asked for
@pytest.mark.parametrize("launch_s", [0.0003, 0.0071, 0.0137, 0.043])  # chunks that end off the steps
def test_a_stepping_counter_gives_the_busy_power_and_joules_per_launch(t0, launch_s):
    clock = Clock(t0)
    board = Board(clock, launch_s=launch_s)
    got = energy.window(board.counter, board.launch, lambda: None, board.launch_s, clock.now, clock.sleep)
    assert got.reason is None
    assert got.window_s >= energy.MIN_WINDOW_S
    # The simulated counter reads idle the GPU (3.6 ms each) in the closing 0.1 s, which the real ones do not: -2%
    assert got.watts == pytest.approx(board.busy_w, rel=0.03)
    assert got.per_launch_j == pytest.approx(board.busy_w * board.launch_s, rel=0.02)
    assert got.window_j == pytest.approx(got.per_launch_j * got.launches)


@pytest.mark.parametrize("t0", [0.0, 0.06])
def test_the_window_says_when_it_opened_so_that_another_reading_can_cover_the_same_span(t0):
    clock = Clock(t0)
    board = Board(clock, launch_s=0.0071)
    busy = []  # each launch's start and end on the simulated clock
    launch = board.launch

    def timed_launch():
        busy.append(clock.t)
        launch()
        busy.append(clock.t)
    got = energy.window(board.counter, timed_launch, lambda: None, board.launch_s, clock.now, clock.sleep)
    # It opens on a counter step, before the first launch by one counter read at most, and closes within a
    # closing chunk of the last launch's end: the span is where the board ran the case.
    assert got.opened_at == pytest.approx(round(got.opened_at / STEP_S) * STEP_S, abs=clock.read_s)
    assert 0 <= busy[0] - got.opened_at <= clock.read_s
    assert abs(got.opened_at + got.window_s - busy[-1]) <= energy.CLOSE_CHUNK_S + board.launch_s


def test_a_missing_counter_is_not_measured_and_runs_nothing():
    launches = []
    got = energy.window(lambda: None, lambda: launches.append(1), lambda: None, 0.005)
    assert got.window_j is None and got.per_launch_j is None and got.watts is None
    assert got.reason == energy.NO_COUNTER
    assert not launches


def test_a_window_shorter_than_a_second_is_not_measured():
    clock = Clock()
    board = Board(clock)
    got = energy.window(board.counter, board.launch, lambda: None, board.launch_s, clock.now, clock.sleep,
                        min_window_s=0.3)
    assert got.window_j is None and got.window_s < energy.MIN_WINDOW_S
    assert "shorter than 1 s" in got.reason
    assert energy.judge(0, 5_000, 0.999, 10).reason is not None
    assert energy.judge(0, 5_000, 1.0, 10).window_j == pytest.approx(5.0)


def test_a_counter_that_never_moves_is_not_measured():
    clock = Clock()
    board = Board(clock)
    got = energy.window(lambda: 1234, board.launch, lambda: None, board.launch_s, clock.now, clock.sleep)
    assert got.window_j is None and got.reason == "energy counter did not advance over the window"


def test_the_cool_down_waits_for_the_power_to_fall_and_no_longer_than_its_bound():
    clock = Clock()
    start = clock.t
    falling = lambda: max(60.0, 400.0 - 400.0 * (clock.t - start))  # noqa: E731 (back to idle after 0.85 s)
    floor = [60.0]
    waited = energy.cool_down(falling, clock.now, clock.sleep, floor)
    assert 0.8 <= waited <= 0.9
    clock2 = Clock()
    assert energy.cool_down(lambda: 400.0, clock2.now, clock2.sleep, [60.0]) == pytest.approx(energy.COOL_MAX_S,
                                                                                                abs=energy.COOL_POLL_S)
    clock3 = Clock()
    assert energy.cool_down(lambda: 60.0, clock3.now, clock3.sleep, [None]) == pytest.approx(energy.COOL_MIN_S,
                                                                                               abs=energy.COOL_POLL_S)


class FakeNvml:
    """What measure's Telemetry reads, on real time: probes say 999 W (an instant reading that is not the truth);
    the counter says `watts`, stepping every STEP_S."""

    def __init__(self, watts: float = 250.0, counter: bool = True) -> None:
        self.watts, self.has_counter = watts, counter
        self.origin = time.perf_counter()
        self.power_method = "instant power"

    def max_clock(self, which):
        return 1980.0

    def probe(self) -> Probe:
        return Probe(1980.0, 2619.0, 0, 999.0)

    def power_w(self) -> float:
        return 60.0

    def energy_mj(self):
        if not self.has_counter:
            return None
        steps = math.floor((time.perf_counter() - self.origin) / STEP_S)
        return int(steps * STEP_S * self.watts * 1e3)


class WatchedCpu(CpuBackend):
    def __init__(self, nvml: FakeNvml) -> None:
        super().__init__()
        self.nvml = nvml

    def telemetry(self):
        return Telemetry(self.nvml)

    def timed_samples(self, fn, reps, count, during=None):
        if during is not None:
            during()
        return super().timed_samples(fn, reps, count)


QUICK = measure.TimingSettings(budget_s=0.01, min_samples=3, max_noise=1.0, min_sample_ms=0.0)


def launch():
    time.sleep(0.001)


def test_without_energy_asked_no_power_reading_becomes_joules():
    stats = measure.measure(WatchedCpu(FakeNvml()), launch, QUICK)
    assert stats.power_w == pytest.approx(999.0)  # the probes' power stays, named as such
    assert stats.energy_method == "instant power"
    assert stats.energy_j is None and stats.energy_window_j is None
    assert stats.energy_note == measure.ENERGY_OFF


def test_energy_asked_comes_from_the_counter_window_not_the_probes():
    from dataclasses import replace
    stats = measure.measure(WatchedCpu(FakeNvml(watts=250.0)), launch, replace(QUICK, energy=True))
    assert stats.energy_method == "counter" and stats.energy_note is None
    assert stats.energy_window_ms >= 1e3 * energy.MIN_WINDOW_S
    assert stats.power_w == pytest.approx(250.0, rel=0.05)
    launches = stats.energy_window_j / stats.energy_j
    assert launches == pytest.approx(round(launches))
    assert stats.energy_j == pytest.approx(250.0 * stats.energy_window_ms * 1e-3 / launches, rel=0.05)
    assert stats.as_record()["energy_window_j"] == stats.energy_window_j


def test_energy_asked_without_a_counter_says_so():
    from dataclasses import replace
    stats = measure.measure(WatchedCpu(FakeNvml(counter=False)), launch, replace(QUICK, energy=True))
    assert stats.energy_j is None and stats.energy_window_j is None
    assert stats.energy_note == f"not measured: {energy.NO_COUNTER}"


def test_the_command_lines_energy_flag_reaches_calls_that_leave_it_unset(monkeypatch):
    monkeypatch.setattr(measure, "ENERGY", [True])
    stats = measure.measure(WatchedCpu(FakeNvml(counter=False)), launch, QUICK)
    assert stats.energy_note == f"not measured: {energy.NO_COUNTER}"
    from dataclasses import replace
    stats = measure.measure(WatchedCpu(FakeNvml(counter=False)), launch, replace(QUICK, energy=False))
    assert stats.energy_note == measure.ENERGY_OFF
