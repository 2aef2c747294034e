"""An energy window (nnbench/runtime/energy.py) checked against nvidia-smi's power log of the same seconds: a
second reading of the board's power, taken by another program through another NVML field, integrated over the
window's span and compared with the counter's joules within a tolerance that the log's own sampling sets.

Log it with (docs/ENERGY.md):

    nvidia-smi -i <bus id> --query-gpu=timestamp,power.draw.instant --format=csv,noheader,nounits -lms 25

The field is `power.draw.instant`. `power.draw` is, on Ampere and newer boards, an average over the last second
(`power.draw.average`): over a window of one second it lags the whole ramp from idle and reads 20-25% low
(lab/journal/measurement.md, H100), so it is no check of a window this short and is not used for one.

Why the tolerance is what it is (`tolerance_j`): the log and the counter read the same board's sensor, and over
two-second windows on the H100 the instantaneous power times time agreed with the counter within -2.3% and
+1.1% (SENSOR_REL covers that). The rest is at the window's edges, where the power steps between the
cool-down's idle and the case's load: an instantaneous reading is the sensor's latest value, refreshed about
every POWER_REFRESH_S (the counter's step), so a step shows up to that late in the log; and the trapezoid
interpolates across one logging period where the step falls. Each costs the size of the step times that time,
which on a one-second window is several percent: the check is looser than the 5% of the counter read twice, but
it is the only one here that does not go through the counter."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from datetime import datetime

import numpy as np

FIELD = "power.draw.instant"
AVERAGE_FIELD = "power.draw.average"  # logged alongside where the driver has it, for the record only
TIMESTAMP = "%Y/%m/%d %H:%M:%S.%f"  # nvidia-smi's, in local time, to the millisecond
SENSOR_REL = 0.03  # the two readings of one sensor over a steady load (the H100: -2.3%, +1.1% over 2 s)
POWER_REFRESH_S = 0.1  # how often NVML refreshes the board's power on the H100 (the counter's step)
MIN_SAMPLES = 5  # log lines inside a window, fewer and the log does not describe it
MAX_PERIOD_S = 0.25  # a sparser log misses the edges by more than the window can absorb


def command(bus: str, period_ms: int, fields: tuple[str, ...] = (FIELD,)) -> list[str]:
    """nvidia-smi logging `fields` of the GPU at PCI `bus` every `period_ms`, one CSV line each, no units."""
    return ["nvidia-smi", "-i", bus, f"--query-gpu=timestamp,{','.join(fields)}", "--format=csv,noheader,nounits",
            "-lms", str(period_ms)]


def parse(text: str, column: int = 1) -> list[tuple[float, float]]:
    """(seconds since the epoch, watts) per line of a log written by `command`, `column` being the power's
    (1: the first field after the timestamp). Lines without a number there ('[N/A]', a partial last line
    after the logger was stopped) are left out."""
    samples = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) <= column:
            continue
        try:
            t = datetime.strptime(cells[0], TIMESTAMP).timestamp()
            w = float(cells[column])
        except ValueError:
            continue
        samples.append((t, w))
    samples.sort()
    return samples


def joules(samples: list[tuple[float, float]], start: float, end: float) -> float | None:
    """The trapezoid of the log's power from `start` to `end` (seconds since the epoch), the power at each edge
    interpolated between the lines around it; None where the log does not reach both edges."""
    if not samples or samples[0][0] > start or samples[-1][0] < end or end <= start:
        return None
    ts, ws = np.array([t for t, _ in samples]), np.array([w for _, w in samples])
    inside = (ts > start) & (ts < end)
    t = np.concatenate(([start], ts[inside], [end]))
    w = np.concatenate(([np.interp(start, ts, ws)], ws[inside], [np.interp(end, ts, ws)]))
    return float(np.sum(np.diff(t) * (w[1:] + w[:-1]) / 2))


@dataclass
class Check:
    """One window's counter joules against the log's: `reason` says why there is no comparison."""

    counter_j: float
    smi_j: float | None = None
    tolerance_j: float | None = None
    samples: int = 0  # log lines inside the window
    period_s: float | None = None  # the log's median spacing around the window
    step_w: float | None = None  # the largest change of power the log shows around the window
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.reason is None and abs(self.counter_j - self.smi_j) <= self.tolerance_j

    @property
    def rel(self) -> float | None:
        return None if self.smi_j is None else self.counter_j / self.smi_j - 1

    def line(self) -> str:
        if self.reason:
            return f"counter {self.counter_j:.1f} J, no nvidia-smi comparison: {self.reason}"
        return (f"counter {self.counter_j:.1f} J, nvidia-smi {self.smi_j:.1f} J ({100 * self.rel:+.1f}%, allowed "
                f"+-{self.tolerance_j:.1f} J = {100 * self.tolerance_j / self.smi_j:.1f}%; {self.samples} lines every "
                f"{1e3 * self.period_s:.0f} ms, power step {self.step_w:.0f} W)")


def tolerance_j(smi_j: float, period_s: float, step_w: float) -> float:
    """The most the counter's joules may differ from the log's `smi_j` (module docstring): the sensor's agreement
    with itself, and at the edges a step of `step_w` seen up to a refresh late and smeared over one logging
    period. It depends on the log only, never on the figure it checks."""
    return SENSOR_REL * smi_j + step_w * (POWER_REFRESH_S + period_s)


def check(counter_j: float, start: float, end: float, samples: list[tuple[float, float]]) -> Check:
    """The counter's `counter_j` over [start, end] (seconds since the epoch) against the log's `samples`."""
    inside = [s for s in samples if start <= s[0] <= end]
    if len(inside) < MIN_SAMPLES:
        return Check(counter_j, samples=len(inside), reason=f"{len(inside)} log lines in the window, fewer than "
                                                            f"{MIN_SAMPLES}")
    smi_j = joules(samples, start, end)
    if smi_j is None:
        return Check(counter_j, samples=len(inside), reason="the log does not cover the window's start and end")
    before = [s for s in samples if s[0] < start][-1:]
    after = [s for s in samples if s[0] > end][:1]
    around = before + inside + after
    period_s = statistics.median(b[0] - a[0] for a, b in zip(around, around[1:]))
    if period_s > MAX_PERIOD_S:
        return Check(counter_j, samples=len(inside), period_s=period_s,
                     reason=f"log period {1e3 * period_s:.0f} ms, longer than {1e3 * MAX_PERIOD_S:.0f} ms")
    watts = [w for _, w in around]
    step_w = max(watts) - min(watts)
    return Check(counter_j, smi_j, tolerance_j(smi_j, period_s, step_w), len(inside), period_s, step_w)
