"""The per-sample trainer's GPU path on the CPU: kernels_cu/mlp's per-sample kernels written in NumPy over a flat
stand-in memory (addresses are integers, as the launches' pointer arithmetic needs), so that train_gpu, its timing
through `measure` and the defenses of nnbench/audit.py that apply to training run as they do on a GPU. Each cheat
is a planted defect in one stand-in kernel: it is caught with the defenses on, and passes with the one that
catches it off."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from nnbench import audit, measure
from nnbench.workloads.train import mlp, outcome
from tests.standins import HostArrayGpu

BASE = 1 << 20  # each buffer at its own address, far apart


class Buf:
    def __init__(self, addr: int, arr: np.ndarray) -> None:
        self.addr, self.arr = addr, arr

    def __int__(self) -> int:
        return self.addr


class FlatGpu(HostArrayGpu):
    """The CUDA seam over host arrays at integer addresses; each launch timed at `ms`. `cheat` plants a defect
    in one kernel after its first `after` launches (the check's and training's): 'lazy' (the updates return at
    once), 'stale' (the hidden deltas are no longer written: the last ones, which still move the weights),
    'sloppy' (the update at half the rate: the weights move, wrongly)."""

    def __init__(self, ms: float = 100.0, cheat: str | None = None, after: int = 10**9) -> None:
        super().__init__(ms)
        self.cheat, self.after = cheat, after
        self.bufs: list[Buf] = []
        self.next = BASE
        self.calls: dict[str, int] = {}

    # memory
    def upload(self, host) -> Buf:
        arr = np.array(host, copy=True).ravel()
        buf = Buf(self.next, arr)
        self.next += (arr.nbytes // BASE + 2) * BASE
        self.bufs.append(buf)
        return buf

    def at(self, ptr, count: int | None = None) -> np.ndarray:
        p = int(ptr)
        for b in self.bufs:
            if b.addr <= p < b.addr + b.arr.nbytes:
                view = b.arr[(p - b.addr) // b.arr.itemsize:]
                return view if count is None else view[:count]
        raise AssertionError(f"no buffer at {p:#x}")

    def write(self, buf: Buf, host) -> None:
        buf.arr[...] = np.asarray(host).ravel()

    def download(self, buf: Buf, like):
        return buf.arr.copy().reshape(np.shape(like)).astype(np.asarray(like).dtype)

    def fill_nan(self, buf: Buf, count: int) -> None:
        buf.arr[:count] = np.nan

    def ptr(self, buf: Buf) -> int:
        return buf.addr

    # kernels
    def load(self, compiled, name: str):
        return SimpleNamespace(name=name)

    def bind(self, kernel, grid, block, args, signature=None, *, smem=0, stream=None):
        run = getattr(self, "_" + kernel.name)
        return lambda: run(*args)

    def _count(self, name: str) -> int:
        self.calls[name] = self.calls.get(name, 0) + 1
        return self.calls[name]

    def _forward(self, w, x, out, n_in, n_out):
        n_in, n_out = int(n_in), int(n_out)
        W = self.at(w, n_out * (n_in + 1)).reshape(n_out, n_in + 1)
        self.at(out, n_out)[:] = 1 / (1 + np.exp(-(W[:, :n_in] @ self.at(x, n_in) + W[:, n_in])))

    def _delta_output(self, o, t, delta, n, err):
        n = int(n)
        e = self.at(t, n) - self.at(o, n)
        self.at(delta, n)[:] = self.at(o, n) * (1 - self.at(o, n)) * e
        self.at(err, 1)[0] += np.float32(0.5 * e @ e)

    def _delta_hidden(self, o, w_next, delta_next, delta, n, n_next):
        if self._cheating("delta_hidden") and self.cheat == "stale":
            return
        n, n_next = int(n), int(n_next)
        W = self.at(w_next, n_next * (n + 1)).reshape(n_next, n + 1)
        self.at(delta, n)[:] = self.at(o, n) * (1 - self.at(o, n)) * (W[:, :n].T @ self.at(delta_next, n_next))

    def _cheating(self, name: str) -> bool:
        return self.cheat is not None and self._count(name) > self.after

    def _update_momentum(self, w, v, n_in, n_out, mom):
        if self._cheating("update_momentum") and self.cheat == "lazy":
            return
        size = int(n_out) * (int(n_in) + 1)
        self.at(w, size)[:] += mom * self.at(v, size)

    def _update_rate(self, w, v, d, x, n_in, n_out, rate, mom):
        cheating = self._cheating("update_rate")
        if cheating and self.cheat == "lazy":
            return
        if cheating and self.cheat == "sloppy":
            rate = rate / 2
        n_in, n_out = int(n_in), int(n_out)
        g = (rate * np.outer(self.at(d, n_out), np.append(self.at(x, n_in), 1.0))).astype(np.float32).ravel()
        size = n_out * (n_in + 1)
        self.at(w, size)[:] += g
        self.at(v, size)[:] = mom * self.at(v, size) + g


LAYERS = (60, 6, 5, 7)


def session_row(backend, monkeypatch, off: tuple[str, ...] = ()):
    """The row that TrainSession.run_case makes of the `simple` version on `backend` (its module a stand-in: the
    stand-in kernels are the module), and its Outcome, with the defenses `off` switched off."""
    from nnbench.workloads.base import Case
    from nnbench.workloads.train.session import TrainSession, problem_for
    monkeypatch.setattr(audit, "ENABLED", set(audit.DEFENSES) - set(off))
    monkeypatch.setattr(mlp, "compile_versions", lambda arch, chosen: {v.name: object() for v, _ in chosen})
    made = {}
    version = mlp.PerSampleRun.version

    def keep(self, *a, **k):
        made["rec"], made["out"] = version(self, *a, **k)
        return made["rec"], made["out"]
    monkeypatch.setattr(mlp.PerSampleRun, "version", keep)
    v = next(v for v in mlp.versions() if v.name == "simple")
    session = TrainSession(backend, None, None, 0, {})
    problem = problem_for(None, LAYERS, max_iterations=104, test_per_letter=1)
    return session.run_case(Case(v, tuple(v.defaults().items())), problem, None), made["out"]


def test_the_honest_per_sample_version_is_timed_through_measure_per_iteration(monkeypatch):
    rec, out = session_row(FlatGpu(ms=100.0), monkeypatch)
    assert rec["status"] == "PASS", rec
    assert isinstance(out, outcome.Outcome) and out.failures and not any(why for _, why in out.failures)
    # a block is an epoch of the 52 training letters, one `measure` sample: 100 ms a block is 100/52 ms a step
    assert out.stats.timing == measure.HOST_ISSUED and out.stats.samples >= mlp.BLOCK_TIMING.min_samples
    assert out.stats.median_ms == pytest.approx(100.0 / 52) and out.seconds_per_step == pytest.approx(0.1 / 52)
    assert rec["us_per_iteration"] == pytest.approx(1e5 / 52) and rec["median_ms"] == pytest.approx(100.0 / 52)
    assert rec["samples_ms"] == pytest.approx([100.0 / 52] * rec["samples"]) and rec["timing"] == measure.HOST_ISSUED


# Per iteration of LAYERS, 3 launches of each update kernel and 2 of delta_hidden: the check's 20 iterations and
# training's 104 come first, the timed blocks after.
UPDATES, DELTAS = 3 * (20 + 104), 2 * (20 + 104)


@pytest.mark.parametrize("cheat, after, caught", [
    ("lazy", UPDATES, {audit.TIMED_OUTPUT, audit.FRESH_BUFFERS}),  # right only until timed
    ("stale", DELTAS, {audit.TIMED_OUTPUT, audit.FRESH_BUFFERS}),  # the poison shows the deltas not written
    ("sloppy", UPDATES, {audit.FRESH_BUFFERS}),  # the weights move when timed, wrongly: the check again catches it
])
@pytest.mark.filterwarnings("ignore:overflow encountered in exp")  # stale deltas drive the sigmoid far out
def test_each_trainer_cheat_is_caught_and_passes_with_its_defenses_off(monkeypatch, cheat, after, caught):
    rec, out = session_row(FlatGpu(cheat=cheat, after=after), monkeypatch)
    assert rec["status"] == "FAIL" and {d for d, why in out.failures if why} == caught, rec
    assert all(f"{d}:" in rec["error"] for d in caught)
    rec, out = session_row(FlatGpu(cheat=cheat, after=after), monkeypatch, off=tuple(caught))
    assert rec["status"] == "PASS" and not rec.get("error"), rec


def test_a_limit_that_unmoved_weights_pass_fails_the_row(monkeypatch):
    from nnbench.workloads.train import session as train_session
    run = mlp.PerSampleRun(FlatGpu(), LAYERS, mlp.Hyper(max_iterations=52), test_per_letter=1)
    assert train_session.unmoved_pass(run, run.rtol) is None
    assert "never move" in train_session.unmoved_pass(run, 1.0)
    monkeypatch.setattr(audit, "ENABLED", set(audit.DEFENSES) - {audit.ZERO_OUTPUT})
    assert audit.judge({"status": "PASS"}, [(audit.ZERO_OUTPUT, train_session.unmoved_pass(run, 1.0))])["status"] \
        == "PASS"
