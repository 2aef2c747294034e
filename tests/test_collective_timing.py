"""measure.measure_collective: a data-parallel step timed as the one-GPU step is (hot samples behind the
blocking kernel), with every choice agreed across the ranks so that their collectives stay matched.

Ranks are threads here, each with its own fake backend; the agreement is a barrier-backed allreduce.
What matters is that every rank issues the launch exactly as often as every other (on a GPU an extra
launch's allreduce would wait forever for its partner), whatever each rank's noise or queue does."""

import threading
from pathlib import Path

import numpy as np
import pytest

from nnbench import measure
from nnbench.errors import QueueFull

from .conftest import mpirun_python, needs_mpi

HERE = Path(__file__).parent


class ThreadWorld:
    """max/min over `n` threads, as exchange.World does over MPI ranks."""

    def __init__(self, n: int) -> None:
        self.barrier, self.values = threading.Barrier(n, timeout=20), [None] * n

    def rank(self, i: int):
        world = self

        class Agree:
            def _reduce(self, value, pick):
                world.values[i] = value
                world.barrier.wait()
                out = pick(world.values)
                world.barrier.wait()
                return out

            def max(self, value):
                return self._reduce(value, max)

            def min(self, value):
                return self._reduce(value, min)
        return Agree()


class RankBackend:
    """One rank's GPU: `noise` spreads its sample times; a batch of more than `room` launches times out
    (every launch still runs, as behind a blocking kernel that gave up), and so does every batch with
    `never_blocks` (a collective that waits on the host)."""

    name = "fake"
    runs_kernels = True

    def __init__(self, seed: int, noise: float, room: int = 10_000, never_blocks: bool = False) -> None:
        self.rng, self.noise, self.room, self.never_blocks = np.random.default_rng(seed), noise, room, never_blocks
        self.launches = 0
        self.collective_flags: list[bool] = []

    def _sample(self) -> float:
        return 1.0 + self.noise * self.rng.uniform()

    def timed(self, fn, reps, during=None):
        self.launches += reps
        return self._sample()

    def timed_samples(self, fn, reps, count, during=None, collective=False):
        self.collective_flags.append(collective)
        self.launches += reps * count
        if self.never_blocks or reps * count > self.room:
            raise QueueFull("void")
        return [self._sample() for _ in range(count)]

    def issued_by_host(self, fn):
        return False

    def sm_clock_mhz(self):
        return None


def run_ranks(backends, settings):
    world = ThreadWorld(len(backends))
    out: list = [None] * len(backends)
    errors: list = []

    def go(i):
        try:
            out[i] = measure.measure_collective(backends[i], lambda: None, world.rank(i), settings)
        except Exception as e:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(e)
            world.barrier.abort()

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(backends))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    if errors:
        raise errors[0]
    return out


QUICK = measure.TimingSettings(budget_s=0.05, min_samples=10, max_noise=0.01, min_sample_ms=0.05)


def test_a_quiet_rank_goes_on_while_a_noisy_one_needs_samples():
    # alone, the quiet rank would stop at 10 samples and the noisy one only at the budget
    quiet, noisy = RankBackend(0, 0.0), RankBackend(1, 0.5)
    stats = run_ranks([quiet, noisy], QUICK)
    assert quiet.launches == noisy.launches
    assert stats[0].samples == stats[1].samples > QUICK.min_samples
    assert stats[0].converged and not stats[1].converged


def test_samples_are_hot_batches_asked_as_a_collective():
    be = RankBackend(0, 0.0)
    s = measure.measure_collective(be, lambda: None, measure.Solo(), QUICK)
    assert s.timing == measure.HOT_BATCHED and s.reps == 1 and s.median_ms == 1.0
    assert be.collective_flags and all(be.collective_flags)


def test_a_batch_void_on_one_rank_is_void_on_all_and_shrinks_on_all():
    roomy, cramped = RankBackend(0, 0.0), RankBackend(1, 0.0, room=3)
    stats = run_ranks([roomy, cramped], QUICK)
    assert roomy.launches == cramped.launches
    assert stats[0].timing == stats[1].timing == measure.HOT_BATCHED  # batches of 2 still fit the room of 3
    assert stats[0].samples == stats[1].samples


def test_every_rank_falls_back_to_host_issued_together():
    blocks, waits = RankBackend(0, 0.0), RankBackend(1, 0.0, never_blocks=True)
    stats = run_ranks([blocks, waits], QUICK)
    assert blocks.launches == waits.launches
    assert stats[0].timing == stats[1].timing == measure.HOST_ISSUED


def test_reps_follow_the_slowest_rank_estimate():
    class Fast(RankBackend):
        def _sample(self):
            return 0.001

    fast, slow = Fast(0, 0.0), RankBackend(1, 0.0)
    stats = run_ranks([fast, slow], QUICK)
    assert stats[0].reps == stats[1].reps == 1  # the slow rank's 1 ms needs one launch a sample
    assert fast.launches == slow.launches


@pytest.mark.parametrize("host", [False, True])
def test_the_energy_window_is_never_run(host):
    import dataclasses
    s = measure.measure_collective(RankBackend(0, 0.0), lambda: None, measure.Solo(),
                                   dataclasses.replace(QUICK, host_issued=host, energy=True))
    assert s.energy_j is None and "collective" in s.energy_note


@needs_mpi
def test_real_mpi_ranks_call_the_collective_equally_often(tmp_path):
    """Over real MPI: rank 0 would stop at 5 samples, rank 1 only at its budget; both take as many."""
    res = mpirun_python(2, str(HERE / "mpi" / "collective_timing.py"), str(tmp_path / "out"))
    assert res.returncode == 0, res.stderr[-2000:]
    rows = [(tmp_path / f"out.{r}").read_text().split() for r in range(2)]
    assert rows[0][:2] == rows[1][:2] and int(rows[0][1]) > 5, rows
    assert rows[0][2] == measure.HOST
