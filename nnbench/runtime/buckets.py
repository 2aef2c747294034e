"""Bucket sizes for the data-parallel gradient exchange, chosen from measurements rather than a constant
(`nnbench train --gpus N` without --bucket-mb).

- The allreduce curve: NCCL's allreduce over the run's ranks, timed by measure.measure_collective at a
  ladder of sizes (LADDER_FIRST floats, doubling up to the whole gradient), fitted by least squares to
  t(bytes) = latency + bytes / bandwidth. Timed once per device, world size and driver and kept in the
  cache folder (CACHE_NAME) as autotune's choices are (nnbench/runtime/autotune.py); rank 0 reads the
  cache and tells the others, so that every rank times the ladder or none does.
- The backward pass (Backward, from the caller): each layer's gradient-ready time on the default stream,
  the work that goes with its bucket on the side stream (split-K sum, update) and when the backward's
  last launch ends; each launch timed alone.
- The model (`exposed_us`): a bucket starts on the side stream once its last layer's gradient is ready
  and the previous bucket is done, and takes the curve's time for its bytes plus its layers' side work;
  what runs past the backward's end is exposed. `choose` takes, among the distinct plans that
  exchange.plan_buckets makes at some cap (one allreduce among them), the one with least exposed time
  plus one latency for every bucket past the first: a bucket's NCCL kernel runs beside the backward's
  GEMMs on the same SMs, which the model does not time, so a plan with more buckets must save more
  than their fixed cost. Ties go to fewer buckets.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import dataclass

import numpy as np

from nnbench import measure, paths, safeio
from nnbench.runtime.exchange import plan_buckets

CACHE_NAME = "allreduce.json"
FORMAT = 1
LADDER_FIRST = 1 << 12  # floats (16 KB): below this NCCL's time is its latency alone
CURVE_TIMING = measure.TimingSettings(budget_s=0.05, min_samples=5, max_noise=0.02, energy=False)


@dataclass(frozen=True)
class Curve:
    latency_us: float
    gb_s: float  # bandwidth: GB/s = bytes per ns = 1e3 bytes per us

    def us(self, floats: int) -> float:
        return self.latency_us + 4 * floats / (1e3 * self.gb_s)

    def label(self) -> str:
        return f"{self.latency_us:.1f} us + bytes at {self.gb_s:.0f} GB/s"


def fit(floats: list[int], times_us: list[float]) -> Curve:
    """Least squares t = latency + bytes / bandwidth; a negative latency (noise at the small sizes) is
    refitted through the origin, and a flat or falling curve is all latency (bandwidth unbounded)."""
    x = 4.0 * np.asarray(floats, dtype=float)
    t = np.asarray(times_us, dtype=float)
    if x.size == 0 or x.size != t.size:
        raise ValueError("a curve needs as many times as sizes, at least one")
    if x.size > 1 and np.ptp(x) > 0:
        slope, latency = np.polyfit(x, t, 1)
    else:
        slope, latency = 0.0, float(t.mean())
    if latency < 0:
        slope, latency = float(x @ t / (x @ x)), 0.0
    if slope <= 0:
        return Curve(float(t.min()), float("inf"))
    return Curve(float(latency), float(1e-3 / slope))


def ladder(total_floats: int) -> list[int]:
    """The sizes timed: LADDER_FIRST floats doubling, then the whole gradient."""
    sizes, n = [], LADDER_FIRST
    while n < total_floats:
        sizes.append(n)
        n *= 2
    return sizes + [max(total_floats, 1)]


@dataclass(frozen=True)
class Backward:
    """One step's backward pass as the model sees it; per weight layer, index 0 the first layer."""

    sizes: list[int]  # floats of each layer's gradient
    ready_us: list[float]  # from the backward's first launch until the layer's gradient is written
    side_us: list[float]  # the layer's work that goes with its bucket (split-K sum, update), timed alone
    end_us: float  # the backward's last launch on the default stream ends


def exposed_us(bw: Backward, buckets: list[list[int]], curve: Curve) -> float:
    """The side stream's work past the backward's end, for `buckets` (plan_buckets order)."""
    free = 0.0
    for b in buckets:
        start = max(free, max(bw.ready_us[l] for l in b))
        free = start + curve.us(sum(bw.sizes[l] for l in b)) + sum(bw.side_us[l] for l in b)
    return max(0.0, free - bw.end_us)


@dataclass(frozen=True)
class Choice:
    cap: int  # floats, for plan_buckets; 0: one allreduce after the backward pass
    buckets: int
    exposed_us: float  # modelled
    one_us: float  # the model's exposed time for one allreduce
    curve: Curve

    @property
    def mb(self) -> float:
        return self.cap * 4 / (1 << 20)

    def label(self) -> str:
        how = "one allreduce after the backward pass" if self.cap == 0 else \
            f"buckets of <= {self.mb:.3g} MB, on a side stream during the backward pass"
        return (f"{how}; chosen from the allreduce curve ({self.curve.label()}): modelled exposed "
                f"{self.exposed_us:.1f} us, one allreduce {self.one_us:.1f} us")


def candidate_caps(sizes: list[int]) -> list[int]:
    """Caps that make every distinct plan: 0 (one bucket), then each sum of consecutive layers."""
    sums = {sum(sizes[i:j]) for i in range(len(sizes)) for j in range(i + 1, len(sizes) + 1)}
    return [0] + sorted(sums)


def choose(bw: Backward, curve: Curve) -> Choice:
    """The plan of least modelled cost (module docstring); its cap is the smallest that makes it."""
    whole = [list(range(len(bw.sizes) - 1, -1, -1))]
    one = exposed_us(bw, whole, curve)
    best: tuple[float, int, int, float] | None = None  # (cost, buckets, cap, exposed)
    seen: set = set()
    for cap in candidate_caps(bw.sizes):
        plan = plan_buckets(bw.sizes, cap)
        if len(plan) == 1:
            plan, cap = whole, 0  # one bucket: the default stream's one allreduce after the backward pass
        key = tuple(map(tuple, plan))
        if key in seen:
            continue
        seen.add(key)
        exposed = exposed_us(bw, plan, curve)
        ranked = (exposed + curve.latency_us * (len(plan) - 1), len(plan), cap, exposed)
        if best is None or ranked[:2] < best[:2]:
            best = ranked
    _, n, cap, exposed = best
    return Choice(cap, n, exposed, one, curve)


# -- the measured curve, cached -----------------------------------------------------------------------
def cache_key(device: str, ranks: int, kind: str) -> str:
    return hashlib.sha256(json.dumps([device, ranks, kind]).encode()).hexdigest()[:32]


def cached_curve(path, key: str, driver: str, total_floats: int) -> Curve | None:
    """The curve stored under `key` for this driver, if its ladder reached `total_floats`."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        entry = data["entries"][key]
        if data.get("format") != FORMAT or entry["driver"] != driver or entry["max_floats"] < total_floats:
            return None
        return Curve(float(entry["latency_us"]), float(entry["gb_s"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def store_curve(path, key: str, driver: str, device: str, ranks: int, kind: str, floats: list[int],
                times_us: list[float], curve: Curve) -> None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        entries = data["entries"] if data.get("format") == FORMAT and isinstance(data.get("entries"), dict) else {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        entries = {}
    entries[key] = dict(device=device, ranks=ranks, exchange=kind, driver=driver, max_floats=max(floats),
                        floats=floats, times_us=times_us, latency_us=curve.latency_us, gb_s=curve.gb_s,
                        timed_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))
    safeio.write_atomic(path, json.dumps({"format": FORMAT, "entries": entries}, indent=1, sort_keys=True))


def allreduce_curve(backend, world, exchange, total_floats: int, path=None) -> Curve:
    """The run's allreduce curve (module docstring): a collective, every rank calls it."""
    from nnbench.runtime.autotune import Identity
    ident = Identity.of(backend)
    path = path if path is not None else paths.cache_dir() / CACHE_NAME
    key = cache_key(ident.device, world.size, exchange.name)
    curve = world.comm.bcast(cached_curve(path, key, ident.driver, total_floats) if world.rank == 0 else None, 0)
    if curve is not None:
        return curve
    floats = ladder(total_floats)
    buf = backend.upload(np.zeros(floats[-1], np.float32))
    times = [1e3 * measure.measure_collective(backend, exchange.launcher(buf, n), world, CURVE_TIMING).median_ms
             for n in floats]
    times = [world.max(t) for t in times]  # the slowest rank's, as the step's
    curve = fit(floats, times)
    if world.rank == 0:
        store_curve(path, key, ident.driver, ident.device, world.size, exchange.name, floats, times, curve)
    return curve
