"""NVML through NVIDIA's maintained binding (`nvidia-ml-py`, imported as `pynvml`): the GPU's identity,
clocks, power limits, throttle reasons and energy counter, read while `measure` times a case.

What `measure` asks of it, per case (`Telemetry`):
- `start()` and `stop()` bracket the timed window: the total-energy counter (mJ since the driver
  loaded) read at both ends gives the energy the GPU drew over the window;
- `probe()` runs while a batch of samples executes on the GPU (the host would only be waiting): the
  SM and memory clocks and the clock-event ("throttle") reasons at that moment. A batch whose SM
  clock is below 75% of the maximum, or that ran under a power or thermal limit, is dropped by
  `measure` (nvbench's rule), unless the user keeps throttled samples.

Every call is cheap (microseconds: a query of the driver, no process), so reading per batch costs
nothing the GPU waits for. Without the binding or the library (a CPU machine, a container without
the driver's libnvidia-ml) every reading is None and nothing else changes; nvidia-smi is the
fallback for the identity only.
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
SLOW_CLOCK = 0.75  # of the maximum SM clock: below it a sample is dropped (nvbench's threshold)


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


class Nvml:
    """One GPU, named by its PCI bus id (the one name CUDA and NVML agree on)."""

    def __init__(self, pci_bus_id: str) -> None:
        self.bus = pci_bus_id
        self.handle = None
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
        v = self._get(pynvml.nvmlDeviceGetMaxClockInfo, _CLOCK[which]) if pynvml else None
        return float(v) if v else None

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

    def probe(self) -> Probe:
        return Probe(self.clock("sm"), self.clock("mem"), self.reasons())

    def telemetry(self) -> Telemetry | None:
        return Telemetry(self) if self.handle is not None else None


class Telemetry:
    """What one `measure` call reads: the energy over its timed window and a probe per batch."""

    def __init__(self, nvml: Nvml) -> None:
        self.nvml = nvml
        self.max_sm_mhz = nvml.max_clock("sm")
        self._e0 = self._t0 = None
        self.energy_j: float | None = None
        self.window_s: float | None = None

    def start(self) -> None:
        self._e0, self._t0 = self.nvml.energy_mj(), time.perf_counter()

    def probe(self) -> Probe:
        return self.nvml.probe()

    def stop(self) -> None:
        e1, t1 = self.nvml.energy_mj(), time.perf_counter()
        self.window_s = t1 - self._t0 if self._t0 is not None else None
        self.energy_j = (e1 - self._e0) / 1e3 if e1 is not None and self._e0 is not None else None

    def throttled(self, p: Probe) -> bool:
        return throttled(p.sm_mhz, p.reasons, self.max_sm_mhz)


_CLOCK = {"sm": 1, "mem": 2}  # NVML_CLOCK_SM, NVML_CLOCK_MEM


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)
