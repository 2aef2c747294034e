"""Autotuning, as cuDNN's benchmark mode does it: for each shape, every candidate tile is timed once
and the fastest launched, and the choice is kept on disk so that the next run takes it without timing.

- Each candidate is timed by `measure` with short settings (TUNE_SETTINGS). The two fastest are a tie
  where their medians differ by less than either one's noise (at least TIE_FLOOR); one draw then does
  not decide: they are timed again in PAIRS alternating launches (A B, B A, ...: a drift of the clock
  or of the neighbours' load touches both alike), and the median of the pairs' ratios decides. Within
  PAIRED_MARGIN even so, the earlier candidate wins: callers list the fixed behaviour first, so a
  tuned run that found nothing better launches what an untuned one does.
- The cache is one JSON file in the cubin cache's folder (`paths.cache_dir()`), replaced atomically
  (`safeio.write_atomic`). An entry is found by the device (name and UUID, or SM count without NVML),
  the kernel's name, its source hash (the file and every header it includes, as the cubin cache keys
  it), the shape and the candidate set; it is used only if it was tuned under the same driver, else
  tuned again and replaced. A damaged file is an empty cache.
- A case with a tile parameter given on the command line, or a run with --no-autotune, has no tuner:
  the fixed behaviour, as before autotuning.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from nnbench import measure, paths, safeio
from nnbench.errors import NnbenchError

TUNE_SETTINGS = measure.TimingSettings(budget_s=0.05, min_samples=5, max_noise=0.02, energy=False)
TIE_FLOOR = 0.01  # medians closer than 1% are a tie whatever the noise estimate (5 samples estimate it loosely)
PAIRS = 16  # alternating launches of the two tied candidates
PAIRED_MARGIN = 0.005  # a paired median ratio within 0.5% of 1 is still a tie: the earlier candidate wins
CACHE_NAME = "autotune.json"
FORMAT = 1

# How a choice was made, for the record's `tuned` column (docs/JSON.md).
TIMED, PAIRED, CACHED = "timed", "paired", "cache"


def cache_path() -> Path:
    return paths.cache_dir() / CACHE_NAME


@dataclass(frozen=True)
class Identity:
    """The device and driver a timing holds for."""

    device: str
    driver: str

    @staticmethod
    def of(backend) -> Identity:
        env = backend.environment()
        dev = backend.device
        device = f"{dev.name} {env.get('gpu_uuid') or f'({dev.sm_count} SMs)'}"
        return Identity(device, str(env.get("driver") or env.get("cuda") or "unknown"))


def label(params: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items())


@dataclass
class Choice:
    params: dict[str, int]  # the chosen candidate
    index: int  # its place among the candidates
    how: str  # TIMED, PAIRED or CACHED
    candidates: int
    times_ms: list[float | None] = field(default_factory=list)  # each candidate's median (None: could not run)

    def marker(self) -> str:
        """The record's `tuned` column: how, what and among how many."""
        return f"{self.how}: {label(self.params)} ({self.index + 1} of {self.candidates})"


class EventTimer:
    """The tuner's clock on a backend: `measure` for one candidate, one launch group for a pair's half."""

    def __init__(self, backend, settings: measure.TimingSettings = TUNE_SETTINGS) -> None:
        self.backend, self.settings = backend, settings

    def sample(self, launch) -> tuple[float, float, int]:
        """(median ms, relative noise, launches per sample)."""
        st = measure.measure(self.backend, launch, self.settings)
        return st.median_ms, st.noise, st.reps

    def once(self, launch, reps: int) -> float:
        return self.backend.timed(launch, reps) / reps


class Tuner:
    """Chooses among a kernel's candidate tiles per shape; see the module docstring."""

    def __init__(self, identity: Identity, timer, path: Path | None = None, fixed=frozenset()) -> None:
        self.identity, self.timer = identity, timer
        self.path = Path(path) if path is not None else cache_path()
        self.fixed = frozenset(fixed)  # parameters given on the command line
        self.timings = 0  # candidates timed by this tuner (a run from the cache times none)

    @staticmethod
    def for_backend(backend, fixed=()) -> Tuner | None:
        """A tuner on a GPU backend; None elsewhere (the host variants have no tiles to choose)."""
        if not backend.runs_kernels:
            return None
        return Tuner(Identity.of(backend), EventTimer(backend), fixed=fixed)

    def takes(self, variant) -> bool:
        """Whether `variant`'s case is tuned: none of its parameters was given explicitly."""
        return not any(variant.param(name) for name in self.fixed)

    def key(self, kernel: str, source_hash: str, shape: str, candidates: list[dict]) -> str:
        text = json.dumps([self.identity.device, kernel, source_hash, shape, [sorted(c.items()) for c in candidates]])
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def choose(self, kernel: str, source_hash: str, shape: str, candidates: list[dict],
               build: Callable[[dict], Callable[[], None]]) -> Choice:
        """The candidate to launch for `shape`: from the cache if this device and driver tuned it, else
        timed now (each candidate's launch from `build`; one that raises NnbenchError cannot run here)
        and stored. `candidates` lists the fixed behaviour first."""
        if not candidates:
            raise ValueError("no candidates")
        key = self.key(kernel, source_hash, shape, candidates)
        hit = self._cached(key, candidates)
        if hit is not None:
            return hit
        launches: list = []
        times: list[float | None] = []
        stats: dict[int, tuple[float, float, int]] = {}
        for i, c in enumerate(candidates):
            try:
                launch = build(c)
            except NnbenchError:
                launches.append(None)
                times.append(None)
                continue
            launches.append(launch)
            stats[i] = self.timer.sample(launch)
            self.timings += 1
            times.append(stats[i][0])
        if not stats:
            raise NnbenchError(f"autotune {kernel} on {shape}: none of its {len(candidates)} candidates can run")
        ranked = sorted(stats, key=lambda i: (stats[i][0], i))
        best, how = ranked[0], TIMED
        if len(ranked) > 1:
            second = ranked[1]
            (ma, na, ra), (mb, nb, rb) = stats[best], stats[second]
            if (mb - ma) / ma <= max(na, nb, TIE_FLOOR):
                best, how = self._paired(best, second, launches, max(ra, rb)), PAIRED
        choice = Choice(dict(candidates[best]), best, how, len(candidates), times)
        self._store(key, kernel, source_hash, shape, candidates, choice)
        return choice

    def _paired(self, a: int, b: int, launches: list, reps: int) -> int:
        """The faster of two tied candidates by PAIRS alternating timings: the median of t_a / t_b."""
        ratios = []
        for k in range(PAIRS):
            if k % 2 == 0:
                ta = self.timer.once(launches[a], reps)
                tb = self.timer.once(launches[b], reps)
            else:
                tb = self.timer.once(launches[b], reps)
                ta = self.timer.once(launches[a], reps)
            ratios.append(ta / tb if tb > 0 else math.inf)
        ratios.sort()
        r = (ratios[(PAIRS - 1) // 2] + ratios[PAIRS // 2]) / 2
        if r < 1 - PAIRED_MARGIN:
            return a
        if r > 1 + PAIRED_MARGIN:
            return b
        return min(a, b)

    # -- the cache ----------------------------------------------------------------------------------
    def _read(self) -> dict:
        if self.path.exists() and not self.path.is_file():
            return {}  # a FIFO would wait for a writer, /dev/zero read forever: no cache, replaced when written
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}  # none yet, or damaged: tuned again and rewritten whole
        if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("entries"), dict):
            return {}
        return data["entries"]

    def _cached(self, key: str, candidates: list[dict]) -> Choice | None:
        entry = self._read().get(key)
        if not isinstance(entry, dict) or entry.get("driver") != self.identity.driver:
            return None  # another driver's timing: its kernels may run differently under this one
        index = entry.get("index")
        if not isinstance(index, int) or not 0 <= index < len(candidates) or entry.get("params") != candidates[index]:
            return None
        return Choice(dict(candidates[index]), index, CACHED, len(candidates), list(entry.get("times_ms") or []))

    def _store(self, key: str, kernel: str, source_hash: str, shape: str, candidates: list[dict],
               choice: Choice) -> None:
        entries = self._read()  # read again just before writing: another run may have added entries
        entries[key] = {"device": self.identity.device, "driver": self.identity.driver, "kernel": kernel,
                        "source": source_hash, "shape": shape, "candidates": candidates, "index": choice.index,
                        "params": choice.params, "how": choice.how, "times_ms": choice.times_ms,
                        "tuned_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
        safeio.write_atomic(self.path, json.dumps({"format": FORMAT, "entries": entries}, indent=1, sort_keys=True))
