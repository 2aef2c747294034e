import math

import numpy as np
import pytest

from nnbench import measure


class FakeBackend:
    """Returns scripted sample times; counts flushes and launches. With `falls_back`, the blocking
    kernel times out on the launch (as the CUDA backend reports a launch that synchronizes)."""

    name = "fake"
    runs_kernels = True  # timed as a GPU's launches are

    def __init__(self, times, falls_back=False):
        self.times = iter(times)
        self.flushes = 0
        self.calls = []
        self.batches = []
        self.falls_back = falls_back

    def issued_by_host(self, fn):
        return self.falls_back

    def timed(self, fn, reps):
        self.calls.append(reps)
        return next(self.times)

    def timed_samples(self, fn, reps, count):
        self.batches.append(count)
        return [self.timed(fn, reps) for _ in range(count)]

    def flush_l2(self):
        self.flushes += 1

    def sm_clock_mhz(self):
        return 1980.0


def test_summarize_median_iqr_noise():
    s = measure.summarize([1.0, 2.0, 3.0, 4.0, 5.0])
    assert s.median_ms == 3.0 and s.q1_ms == 2.0 and s.q3_ms == 4.0 and s.iqr_ms == 2.0
    assert s.noise == pytest.approx(2.0 / 1.349 / 3.0)
    assert s.iqr_pct == pytest.approx(200 / 3)


def test_stops_at_min_samples_when_quiet():
    be = FakeBackend([1.0] * 100)
    s = measure.measure(be, lambda: None, measure.TimingSettings(budget_s=10))
    assert s.samples == 10 and s.converged and s.sm_clock_mhz == 1980.0


def test_noisy_runs_until_budget_but_at_least_min_samples():
    rng = np.random.default_rng(0)
    be = FakeBackend(list(1.0 + rng.uniform(0, 1, 10_000)))
    s = measure.measure(be, lambda: None, measure.TimingSettings(budget_s=0.0))
    assert s.samples == 10 and not s.converged


def test_cold_flushes_before_every_sample_and_never_batches():
    be = FakeBackend([1.0] * 100)
    s = measure.measure(be, lambda: None, measure.TimingSettings(cold=True))
    assert be.flushes == s.samples and s.reps == 1 and set(be.calls) == {1} and set(be.batches) == {1}


def test_hot_batches_short_kernels():
    be = FakeBackend([0.001] * 100)  # 1 us per launch: batch to reach min_sample_ms
    s = measure.measure(be, lambda: None, measure.TimingSettings(min_sample_ms=0.05))
    assert s.reps == 64  # 50 launches reach min_sample_ms, rounded up to a power of two


class IssueLatencyBackend(FakeBackend):
    """A tiny kernel as the H100 ran configs/ci.yaml's odd convolutions: a launch the host issues alone reads
    its issue latency (`host_ms`, 17-25 us), a queued one its run (7 us)."""

    def __init__(self, host_ms):
        super().__init__([])
        self.host_ms = host_ms

    def timed(self, fn, reps):
        self.calls.append(reps)
        return self.host_ms

    def timed_samples(self, fn, reps, count):
        self.batches.append(count)
        return [0.007 + 0.0005 / reps] * count  # the event pair's cost, shared by the sample's launches


def test_reps_come_from_queued_launches_not_from_one_launch_issued_alone():
    # one launch timed alone read 17, 21 or 25 us in three processes: reps 3, 3 or 2 by that read, and per launch
    # the 2-launch samples read 4% more than the 3-launch ones; from a queued batch, reps is the same in all three
    found = {host: measure.measure(IssueLatencyBackend(host), lambda: None,
                                   measure.TimingSettings(min_sample_ms=0.05, budget_s=10)) for host in
             (0.017, 0.021, 0.025)}
    assert {s.reps for s in found.values()} == {8}
    assert len({round(s.median_ms, 9) for s in found.values()}) == 1
    # a host read past a whole sample's length (60 us, as a 20 us kernel read now and then) is checked too
    assert measure.measure(IssueLatencyBackend(0.06), lambda: None,
                           measure.TimingSettings(min_sample_ms=0.05, budget_s=10)).reps == 8
    # and a host read of many sample lengths (the host's hiccup: a 7 us convolution read over 0.2 ms in one of 20
    # fresh runs on the H100, reps 1 and +18%) is checked by one queued launch before it is believed
    for hiccup in (0.3, 5.0):
        assert measure.measure(IssueLatencyBackend(hiccup), lambda: None,
                               measure.TimingSettings(min_sample_ms=0.05, budget_s=10)).reps == 8


def test_hot_samples_come_in_batches_and_the_stop_rule_runs_after_each():
    be = FakeBackend([1.0] * 100)
    s = measure.measure(be, lambda: None, measure.TimingSettings(budget_s=10, min_samples=25))
    # (the first batch is one launch: the host's read of a long launch checked by a queued one)
    assert be.batches == [1, 10, 10, 10] and s.samples == 30 and s.converged
    big = FakeBackend([0.0001] * 10_000)  # reps near the queue limit: one sample per batch
    s = measure.measure(big, lambda: None, measure.TimingSettings(min_sample_ms=1.0, budget_s=10))
    assert s.reps == measure.MAX_REPS and set(big.batches) == {1}


class FullQueueBackend(FakeBackend):
    """The CUDA backend's queue as the unroll convolutions met it: each launch queues `kernels` kernels, the
    driver's queue holds `capacity`, and a batch that overfills it is void (QueueFull) and halves the room,
    as nnbench/runtime/cuda.py learns it."""

    def __init__(self, kernels, capacity=1000, launch_ms=0.008, host_ms=None):
        super().__init__([])
        self.kernels, self.capacity, self.launch_ms = kernels, capacity, launch_ms
        self.host_ms = host_ms or launch_ms
        self.room = measure.MAX_QUEUED
        self.full = 0

    def queue_room(self, fn):
        return self.room

    def timed(self, fn, reps):
        return self.host_ms

    def timed_samples(self, fn, reps, count):
        from nnbench.errors import QueueFull
        assert count * (reps + 2) <= self.room
        if count * reps > 1 and count * reps * self.kernels > self.capacity:
            self.full += 1
            self.room = max(3, count * (reps + 2) // 2)
            raise QueueFull("full")
        self.batches.append((reps, count))
        return [self.launch_ms] * count


def test_a_batch_that_fills_the_drivers_queue_is_fitted_to_it_not_given_up():
    """0.5 ms samples of an 8 us launch that queues 3 kernels: 64 launches a sample, 7 samples a batch, 1,344
    kernels, more than the driver's queue holds. Each void batch halves the launch's room until a batch fits,
    and every kept sample still holds the 64 launches that reach min_sample_ms; no sample is host-issued."""
    be = FullQueueBackend(kernels=3)
    s = measure.measure(be, lambda: None, measure.TimingSettings(min_sample_ms=0.5, budget_s=10))
    assert be.full >= 1 and s.reps == 64 and s.timing == measure.HOT_BATCHED
    assert {r for r, _ in be.batches[1:]} == {64} and max(c for _, c in be.batches[1:]) * 64 * 3 <= 1000
    assert s.samples >= 10 and s.median_ms == pytest.approx(0.008)
    # one sample alone overfills it (a 1 us launch of 4 kernels, whose host read of 25 us asked a probe of only 80
    # launches: the samples' 510 launches queue 2,040 kernels): its launches are cut to fit, as few as needed
    be = FullQueueBackend(kernels=4, launch_ms=0.001, host_ms=0.025)
    s = measure.measure(be, lambda: None, measure.TimingSettings(min_sample_ms=0.5, budget_s=10))
    assert be.full == 2 and s.reps == 126 and {r for r, _ in be.batches[1:]} == {126} and s.samples >= 10


def test_each_result_names_its_timing_method():
    hot = measure.measure(FakeBackend([1.0] * 100), lambda: None)
    assert hot.timing == "hot-batched" and hot.as_record()["timing"] == "hot-batched"
    long = measure.measure(FakeBackend([1.0] * 100), lambda: None, measure.TimingSettings(min_sample_ms=1000))
    assert long.reps == measure.MAX_REPS and long.timing == "hot-single"  # one sample per blocking kernel
    assert measure.measure(FakeBackend([1.0] * 100), lambda: None, measure.TimingSettings(cold=True)).timing == "cold"
    fell = measure.measure(FakeBackend([1.0] * 2000, falls_back=True), lambda: None)
    assert fell.timing == "host-issued"
    from nnbench.runtime.cpu import CpuBackend
    assert measure.measure(CpuBackend(), lambda: None, measure.TimingSettings(budget_s=0.01)).timing == "host"


def test_the_tables_mark_a_row_that_fell_back():
    from rich.console import Console

    from nnbench.report import tables
    rows = [dict(variant="cublas", step="", shape="64×64×64", median_ms=0.5, iqr_ms=0.01, status="PASS",
                 timing="host-issued"),
            dict(variant="tiled", step=2, shape="64×64×64", median_ms=0.25, iqr_ms=0.01, status="PASS",
                 timing="hot-batched")]
    for make in (tables.gemm_table, tables.conv_table):
        console = Console(width=250, record=True)
        console.print(make(rows, "t"))
        text = console.export_text()
        assert "0.5000" + tables.FELL_BACK in text and "0.2500" + tables.FELL_BACK not in text
        assert "timed host-issued" in text
        console = Console(width=250, record=True)
        console.print(make(rows[1:], "t"))
        assert tables.FELL_BACK not in console.export_text()


def test_rel_err():
    ref = np.array([3.0, 4.0])
    assert measure.rel_err(ref, ref) == 0.0
    assert measure.rel_err(np.array([3.0, 4.5]), ref) == pytest.approx(0.1)
    assert math.isinf(measure.rel_err(np.array([np.nan, 4.0]), ref))
    assert math.isinf(measure.rel_err(np.array([np.inf, 4.0]), ref))


def test_host_issued_samples_are_never_queued_behind_the_blocking_kernel():
    """A PyTorch eager step's cost is the host's own work: queued behind the blocking kernel, the GPU
    would run its ~400 kernels back to back and the figure would hide it. host_issued times each sample
    as the host issues it, with the same warm-up and stopping rule, and the row says so."""
    be = FakeBackend([4.0] * 1000)
    s = measure.measure(be, lambda: None, measure.TimingSettings(budget_s=10, min_samples=12, host_issued=True))
    assert be.batches == [] and s.samples == measure.HOST_WINDOW_MS / 4.0 and s.converged
    assert s.timing == measure.HOST_ISSUED
    queued = FakeBackend([4.0] * 100)
    assert measure.measure(queued, lambda: None, measure.TimingSettings(budget_s=10)).timing == measure.HOT_BATCHED


def test_host_issued_samples_do_not_scan_the_harness_heap():
    """An eager step's time includes Python's collections; with the harness's objects frozen out of the
    collector, it pays for its own garbage only (and they are thawed afterwards)."""
    import gc

    frozen = []

    class Watching(FakeBackend):
        def timed(self, fn, reps):
            frozen.append(gc.get_freeze_count())
            return super().timed(fn, reps)

    keep = [object() for _ in range(1000)]  # the harness's heap
    measure.measure(Watching([4.0] * 1000), lambda: None, measure.TimingSettings(budget_s=10, host_issued=True))
    assert frozen[:2] == [0, 0] and min(frozen[2:]) >= len(keep)  # warm-up and estimate, then the samples
    assert gc.get_freeze_count() == 0


def test_a_soak_freezes_the_heap_without_collecting_it(monkeypatch):
    """A soak's one host-issued sample is not read for its time: the collection before it (0.2 s with PyTorch
    loaded, 2 s of a training seed) is skipped, the freeze kept; a timed run still collects first."""
    import gc

    collected = []
    monkeypatch.setattr(gc, "collect", lambda *a: collected.append(1) or 0)
    settings = measure.TimingSettings(budget_s=10, host_issued=True)
    monkeypatch.setattr(measure, "VERDICTS_ONLY", [True])
    measure.measure(FakeBackend([4.0] * 1000), lambda: None, settings)
    assert collected == [] and gc.get_freeze_count() == 0
    monkeypatch.setattr(measure, "VERDICTS_ONLY", [False])
    measure.measure(FakeBackend([4.0] * 1000), lambda: None, settings)
    assert collected == [1]


def test_host_issued_samples_cover_the_hosts_window_whatever_the_budget():
    """The host's speed wanders over tenths of a second (an eager step read 3.0-7.0 ms inside 0.15 s on
    the H100): a host-issued row that stopped at its 10th quiet sample, or at a short budget, would read
    one stretch of it. It goes on until its samples cover HOST_WINDOW_MS; a queued row stops as before."""
    quiet = FakeBackend([5.0] * 1000)
    s = measure.measure(quiet, lambda: None, measure.TimingSettings(budget_s=0.0, host_issued=True))
    assert s.samples * 5.0 >= measure.HOST_WINDOW_MS and s.samples == measure.HOST_WINDOW_MS / 5.0
    slow_start = FakeBackend([7.0] * 20 + [3.0] * 1000)  # a slow stretch, then the host's usual speed
    s = measure.measure(slow_start, lambda: None, measure.TimingSettings(budget_s=0.0, host_issued=True))
    assert s.median_ms == 3.0
    assert measure.measure(FakeBackend([5.0] * 1000), lambda: None, measure.TimingSettings(budget_s=0.0)).samples == 10


def test_a_launch_that_fell_back_to_host_issue_takes_the_hosts_window_too():
    """A vendor call that synchronizes inside (the cuBLAS step through CuPy at B=256 on the H100) falls
    back to host-issued samples; its host wanders like an eager step's (1.16 then 1.47 ms a run apart with
    ~70 samples), so it covers the same window."""
    be = FakeBackend([5.0] * 1000, falls_back=True)
    s = measure.measure(be, lambda: None, measure.TimingSettings(budget_s=0.0))
    assert s.timing == measure.HOST_ISSUED and s.samples * 5.0 >= measure.HOST_WINDOW_MS
