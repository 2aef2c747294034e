"""NVML through NVIDIA's maintained binding (`nvidia-ml-py`, imported as `pynvml`): the GPU's identity,
clocks, power limits, throttle reasons and energy counter, read while `measure` times a case.

What `measure` asks of it, per case (`Telemetry`):
- `probe()` runs while a batch of samples executes on the GPU (the host would only be waiting): the
  SM and memory clocks, the clock-event ("throttle") reasons and the power at that moment. A batch
  whose SM clock is below 75% of the maximum, or that ran under a power or thermal limit, is dropped
  by `measure` (nvbench's rule), unless the user keeps throttled samples. Measured on the H100
  (lab/journal/measurement.md): 1.3-1.6 us a reading, 7.7 us a probe;
- `start()` and `stop()` bracket the timed window. The total-energy counter (mJ since the driver
  loaded) is exact over long windows but, on the H100, moves only every 100 ms and costs 3.6 ms a
  read: it is read only when the window can last ENERGY_COUNTER_S or more (a long budget, or long
  samples), where both costs are under 1%. A shorter window's power is the mean of its probes'
  readings: the instantaneous power (NVML_FI_DEV_POWER_INSTANT, where the driver has it and it
  answers in microseconds), else nvmlDeviceGetPowerUsage (on Ampere and newer, an average over the
  last second, so it lags a change of load). `energy_method` in each record says which.

Without the binding or the library (a CPU machine, a container without the driver's libnvidia-ml)
every reading is None and nothing else changes; nvidia-smi is the fallback for the identity only.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass

try:
    import pynvml
except ImportError:  # pragma: no cover - the GPU extra brings it
    pynvml = None

# Clock-event reasons (nvmlClocksEventReason*): the bits NVML sets while it holds the clocks down.
REASONS = {
    0x1: "idle", 0x2: "user_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x10: "sync_boost",
    0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake", 0x100: "display_clock",
}
USER_CLOCKS = 0x2  # clocks held by a user's setting: `nvidia-smi -lgc` (locked) or application clocks
# A sample taken while any of these is set ran at a clock the power or heat imposed, not the one asked for.
THROTTLE = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
THROTTLE_NAMES = tuple(name for bit, name in REASONS.items() if bit & THROTTLE)  # as a row's `throttle` names them
SLOW_CLOCK = 0.75  # of the maximum SM clock: below it a sample is dropped (nvbench's threshold)
ENERGY_COUNTER_S = 1.0  # the shortest window read from the energy counter (100 ms steps: within 10%)
INSTANT_MAX_US = 50.0  # an instantaneous-power reading slower than this stays out of the per-batch probe


def reason_names(bits: int | None) -> str:
    """'sw_power_cap|sw_thermal' for a reason mask; '' for none, None where NVML gave none."""
    if bits is None:
        return None
    return "|".join(name for bit, name in REASONS.items() if bits & bit)


def throttled(sm_mhz: float | None, reasons: int | None, max_sm_mhz: float | None) -> bool:
    """nvbench's rule: a sample is not the kernel's own speed when the SM clock was under 75% of its
    maximum, or when a power or thermal limit was holding it down."""
    if reasons is not None and reasons & THROTTLE:
        return True
    return bool(sm_mhz and max_sm_mhz and sm_mhz < SLOW_CLOCK * max_sm_mhz)


_INIT: list[bool] = []


def _init() -> bool:
    if not _INIT:
        ok = False
        if pynvml is not None:
            try:
                pynvml.nvmlInit()
                ok = True
            except pynvml.NVMLError:
                pass
        _INIT.append(ok)
    return _INIT[0]


@dataclass
class Probe:
    """One reading during a batch of samples."""

    sm_mhz: float | None
    mem_mhz: float | None
    reasons: int | None
    power_w: float | None = None


class Nvml:
    """One GPU, named by its PCI bus id (the one name CUDA and NVML agree on)."""

    def __init__(self, pci_bus_id: str) -> None:
        self.bus = pci_bus_id
        self.handle = None
        self._instant: bool | None = None  # whether probes read the instantaneous power (decided once)
        self._max_mhz: dict[str, float] = {}  # the board's maximum clocks, read once: 1.7 ms a read on the H100
        if _init():
            try:
                self.handle = pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id)
            except pynvml.NVMLError:
                pass

    def _get(self, fn, *args):
        if self.handle is None:
            return None
        try:
            return fn(self.handle, *args)
        except pynvml.NVMLError:  # NOT_SUPPORTED on this board, or a transient failure: no reading
            return None

    def _smi(self, field: str) -> str | None:
        if not shutil.which("nvidia-smi"):
            return None
        try:
            out = subprocess.run(["nvidia-smi", f"--id={self.bus}", f"--query-gpu={field}",
                                  "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10)
            return out.stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            return None

    # -- identity and limits ----------------------------------------------------------------------
    def uuid(self) -> str | None:
        """The GPU's UUID (GPU-xxxxxxxx-...): the one name of a device that survives a renumbering."""
        v = self._get(pynvml.nvmlDeviceGetUUID) if pynvml else None
        return _text(v) if v is not None else self._smi("uuid")

    def driver_version(self) -> str | None:
        if self.handle is not None:
            try:
                return _text(pynvml.nvmlSystemGetDriverVersion())
            except pynvml.NVMLError:
                pass
        return self._smi("driver_version")

    def clock(self, which: str) -> float | None:
        v = self._get(pynvml.nvmlDeviceGetClockInfo, _CLOCK[which]) if pynvml else None
        return float(v) if v else None

    def max_clock(self, which: str) -> float | None:
        if which not in self._max_mhz:  # each measure call asks (Telemetry): unread, a case paid 1.7 ms
            v = self._get(pynvml.nvmlDeviceGetMaxClockInfo, _CLOCK[which]) if pynvml else None
            if not v:
                return None
            self._max_mhz[which] = float(v)
        return self._max_mhz[which]

    def reasons(self) -> int | None:
        if pynvml is None:
            return None
        getter = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
        v = self._get(getter)
        return int(v) if v is not None else None

    def power_limits_w(self) -> dict:
        """The enforced power limit, the default and the range a root user may set, in W."""
        out = {"enforced": None, "default": None, "min": None, "max": None}
        if pynvml is None:
            return out
        mw = self._get(pynvml.nvmlDeviceGetEnforcedPowerLimit)
        out["enforced"] = mw / 1e3 if mw else None
        mw = self._get(pynvml.nvmlDeviceGetPowerManagementDefaultLimit)
        out["default"] = mw / 1e3 if mw else None
        rng = self._get(pynvml.nvmlDeviceGetPowerManagementLimitConstraints)
        if rng:
            out["min"], out["max"] = rng[0] / 1e3, rng[1] / 1e3
        return out

    def power_w(self) -> float | None:
        mw = self._get(pynvml.nvmlDeviceGetPowerUsage) if pynvml else None
        return mw / 1e3 if mw is not None else None

    def energy_mj(self) -> int | None:
        """The total-energy counter: millijoules since the driver loaded (Volta and newer)."""
        return self._get(pynvml.nvmlDeviceGetTotalEnergyConsumption) if pynvml else None

    def instant_power_w(self) -> float | None:
        """NVML_FI_DEV_POWER_INSTANT in W, or None where the driver has no such field."""
        if self.handle is None or not hasattr(pynvml, "NVML_FI_DEV_POWER_INSTANT"):
            return None
        try:
            v = pynvml.nvmlDeviceGetFieldValues(self.handle, [pynvml.NVML_FI_DEV_POWER_INSTANT])[0]
        except pynvml.NVMLError:
            return None
        if getattr(v, "nvmlReturn", 0) != 0:
            return None
        return float(v.value.uiVal) / 1e3  # mW

    @property
    def power_method(self) -> str:
        """How probes read the power: 'instant power' where that field answers within INSTANT_MAX_US
        (timed once per GPU), else 'average power' (nvmlDeviceGetPowerUsage)."""
        if self._instant is None:
            costs = []
            for _ in range(5):
                t0 = time.perf_counter()
                ok = self.instant_power_w() is not None
                costs.append((time.perf_counter() - t0) * 1e6)
                if not ok:
                    break
            self._instant = ok and sorted(costs)[len(costs) // 2] <= INSTANT_MAX_US
        return "instant power" if self._instant else "average power"

    def probe(self) -> Probe:
        power = self.instant_power_w() if self.power_method == "instant power" else self.power_w()
        return Probe(self.clock("sm"), self.clock("mem"), self.reasons(), power)

    def telemetry(self) -> Telemetry | None:
        return Telemetry(self) if self.handle is not None else None


class Telemetry:
    """What one `measure` call reads: the energy over its timed window and a probe per batch."""

    def __init__(self, nvml: Nvml) -> None:
        self.nvml = nvml
        self.max_sm_mhz = nvml.max_clock("sm")
        self.power_method = nvml.power_method
        self._e0 = self._t0 = None
        self.energy_j: float | None = None  # from the counter, over windows of ENERGY_COUNTER_S or more
        self.window_s: float | None = None

    def start(self, expect_s: float = 0.0) -> None:
        """The window opens; `expect_s` is how long it can last (the budget, or min_samples long samples)."""
        self._e0 = self.nvml.energy_mj() if expect_s >= ENERGY_COUNTER_S else None
        self._t0 = time.perf_counter()

    def probe(self) -> Probe:
        return self.nvml.probe()

    def stop(self) -> None:
        self.window_s = time.perf_counter() - self._t0 if self._t0 is not None else None
        self.energy_j = None
        if self._e0 is not None and self.window_s is not None and self.window_s >= ENERGY_COUNTER_S:
            e1 = self.nvml.energy_mj()
            self.energy_j = (e1 - self._e0) / 1e3 if e1 is not None else None

    def throttled(self, p: Probe) -> bool:
        return throttled(p.sm_mhz, p.reasons, self.max_sm_mhz)


_CLOCK = {"sm": 1, "mem": 2}  # NVML_CLOCK_SM, NVML_CLOCK_MEM


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)
