"""Energy that is measured: NVML's total-energy counter read over a window of at least a second in which
the case runs again and again, after the timed samples (never inside them) and after a bounded cool-down.
docs/ENERGY.md gives the method and its limits.

Why so: NVML refreshes the power it reports about every 100 ms, and the total-energy counter
(nvmlDeviceGetTotalEnergyConsumption, mJ since the driver loaded, Volta and newer) moves in steps of that
period on the H100. A 4-31 ms timed window sees one power reading, the same for every case timed near it (issue
45 found 204.795 W on four different GEMMs), so an instant reading times a short window is no measurement.
Over a window of a second or more, opened and closed on one of the counter's steps while the case keeps
the GPU busy, the counter's own granularity costs at most a closing chunk (CLOSE_CHUNK_S) of the window.

Where no such window can be had (no counter on this GPU or driver, a window shorter than MIN_WINDOW_S, a
counter that did not move) the reading is None and `reason` says why; nothing falls back to an instant
reading."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

MIN_WINDOW_S = 1.0  # ten of the counter's ~100 ms steps: the window's edges are one step at most off
CHUNK_S = 0.1  # launches issued between two waits while the window fills (the queue stays short)
CLOSE_CHUNK_S = 0.01  # launches between two counter reads while waiting for the closing step: <= 1% of the window
# The window also holds MIN_LAUNCHES launches (so the launch cut at its closing step is <= 1% of them), as long as
# that takes no more than MAX_WINDOW_S.
MIN_LAUNCHES, MAX_WINDOW_S = 50, 10.0
STEP_WAIT_S = 0.5  # at most this long for the counter to step at either edge (5 of its periods)
# The cool-down before a window: the board's power, polled every COOL_POLL_S, must come back within COOL_MARGIN
# (relative) + COOL_MARGIN_W of the lowest power seen in this process's cool-downs, for at least COOL_MIN_S and
# at most COOL_MAX_S (a board that never cools, say under another process's load, is not waited on for ever).
COOL_MIN_S, COOL_MAX_S, COOL_POLL_S = 0.2, 3.0, 0.1
COOL_MARGIN, COOL_MARGIN_W = 0.10, 5.0

NO_COUNTER = "no energy counter (NVML has none for this GPU or driver)"


@dataclass
class EnergyReading:
    """One window: the counter's joules, the launches run in it, its length. `reason` is why there is no
    reading (then the numbers are None)."""

    window_j: float | None = None
    launches: int | None = None
    window_s: float | None = None
    reason: str | None = None
    cooled_s: float | None = None  # the cool-down before the window
    # When the window opened, on the clock `window` ran on (time.perf_counter unless given another): with
    # window_s, the span that another reading of the same window (nvidia-smi's power log) must cover.
    opened_at: float | None = None

    @property
    def per_launch_j(self) -> float | None:
        return self.window_j / self.launches if self.window_j is not None and self.launches else None

    @property
    def watts(self) -> float | None:
        return self.window_j / self.window_s if self.window_j is not None and self.window_s else None


def judge(e0_mj, e1_mj, window_s: float | None, launches: int | None) -> EnergyReading:
    """The rules every window passes before its joules are believed."""
    if e0_mj is None or e1_mj is None:
        return EnergyReading(reason=NO_COUNTER, window_s=window_s, launches=launches)
    if window_s is None or window_s < MIN_WINDOW_S:
        return EnergyReading(reason=f"window {window_s or 0:.3f} s, shorter than {MIN_WINDOW_S:g} s",
                             window_s=window_s, launches=launches)
    if e1_mj <= e0_mj:
        return EnergyReading(reason="energy counter did not advance over the window", window_s=window_s,
                             launches=launches)
    return EnergyReading(window_j=(e1_mj - e0_mj) / 1e3, launches=launches, window_s=window_s)


def _step(counter, since, now, sleep) -> tuple[int | None, float]:
    """The counter's next value after `since` and when it stepped (the middle of the last two reads), polled
    for up to STEP_WAIT_S."""
    t_prev = now()
    t_end = t_prev + STEP_WAIT_S
    while True:
        e = counter()
        t = now()
        if e is None or e != since or t >= t_end:
            return e, (t_prev + t) / 2
        t_prev = t
        sleep(0.002)


def cool_down(power_w, now=time.perf_counter, sleep=time.sleep, floor: list | None = None) -> float:
    """Wait for the board's power to return near the lowest seen in this process (`floor`, a one-item list kept
    across calls), at least COOL_MIN_S and at most COOL_MAX_S; the seconds waited."""
    floor = _FLOOR if floor is None else floor
    t0 = now()
    while True:
        w = power_w()
        t = now() - t0
        if w is not None:
            floor[0] = w if floor[0] is None else min(floor[0], w)
        near = w is None or w <= floor[0] * (1 + COOL_MARGIN) + COOL_MARGIN_W
        if (t >= COOL_MIN_S and near) or t >= COOL_MAX_S:
            return t
        sleep(COOL_POLL_S)


_FLOOR: list = [None]


def window(counter, launch, synchronize, launch_s: float, now=time.perf_counter, sleep=time.sleep,
           min_window_s: float = MIN_WINDOW_S) -> EnergyReading:
    """Run `launch` (one launch of the case) until the window has lasted `min_window_s` (and held MIN_LAUNCHES
    launches, up to MAX_WINDOW_S), opening and closing
    it on steps of the counter (`counter()`: mJ or None), and read the counter's joules over it. `launch_s`
    is one launch's time (the timed median), which sizes the chunks issued between two waits."""
    e = counter()
    if e is None:
        return EnergyReading(reason=NO_COUNTER)
    chunk = max(1, math.ceil(CHUNK_S / max(launch_s, 1e-9)))
    close = max(1, math.ceil(CLOSE_CHUNK_S / max(launch_s, 1e-9)))
    e0, t0 = _step(counter, e, now, sleep)  # the GPU idles here: the window opens on the step
    launches = 0
    while now() - t0 < min_window_s or (launches < MIN_LAUNCHES and now() - t0 < MAX_WINDOW_S):
        for _ in range(chunk):
            launch()
        synchronize()
        launches += chunk
    # Busy until the counter steps, so that the step that closes the window counts busy time only.
    # The step is dated to the middle of the read that saw it and the one before, so the window's length is off
    # by half a closing chunk at most (as are the launches counted).
    e_last = counter()
    t_prev = now()
    t_end = t_prev + STEP_WAIT_S
    while True:
        for _ in range(close):
            launch()
        e1, t = counter(), now()  # read (3.6 ms on the H100) while the chunk runs, so the GPU stays busy
        synchronize()
        launches += close
        if e1 is None or e1 != e_last or t >= t_end:
            break
        t_prev = t
    got = judge(e0, e1, (t_prev + t) / 2 - t0, launches)
    got.opened_at = t0
    return got
