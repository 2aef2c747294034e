"""A sweep's kernels compile while its first cases run (nnbench/sweeps/feed.py), on one worker and on several: a
case is sent as soon as its own kernel is built, in the order the jobs run; a case beyond the device's registers is
still a SKIP row in its place; the rows are those of a sweep that compiles everything first. And the overhead
outside kernels, whole and per worker, is never negative. No GPU: a slow fake compiler and fake workers that
answer at once (a CUDA worker's hello, so the parent compiles)."""

import csv
import threading
import time
from types import SimpleNamespace

import pytest

from nnbench.errors import NnbenchError
from nnbench.runtime.device import for_arch
from nnbench.sweeps import config, sweep

from .test_sweep_overhead import SPACE, _RecordingWorker

COMPILE_S = 0.3


class _CudaWorker(_RecordingWorker):
    """A worker that says it holds an sm_90 GPU; keeps when each job was sent."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.info = {"env": {"backend": "cuda", "gpu": "fake H100", "arch": "sm_90"}, "device": for_arch("sm_90"),
                     "arch": "sm_90"}

    def submit(self, kind, job) -> int:
        with _LOCK:
            SENT.append((time.perf_counter(), job.kind, job.case, job.compiled))
        return super().submit(kind, job)


_LOCK = threading.Lock()
SENT: list = []
BUILT: list = []  # (when the compile ended, the case)


def _slow_compile(registers: dict | None = None):
    """A workload compile of COMPILE_S a kernel; `registers`: per TS, what ptxas says."""
    def compile(arch, cases, jobs=None):
        out = {}
        for c in cases:
            time.sleep(COMPILE_S)
            regs = (registers or {}).get(c.param_dict.get("TS"), 32)
            out[c] = SimpleNamespace(case=c, cached=False, ptxas={c.variant.kernel: SimpleNamespace(registers=regs)})
            with _LOCK:
                BUILT.append((time.perf_counter(), c))
        return out
    return compile


def _sweep(monkeypatch, tmp_path, name, gpus=(), registers=None, overlap=True, space=SPACE):
    spec = config.load_sweep(_write(tmp_path, space))
    monkeypatch.setattr(sweep, "Worker", _CudaWorker)
    monkeypatch.setattr(spec.workload, "compile", _slow_compile(registers))
    monkeypatch.setattr(sweep, "nvcc_path", lambda: "nvcc")
    if not overlap:  # the sweep before: every kernel compiled, then the first case sent
        run_all = sweep.SweepRun.run_all
        monkeypatch.setattr(sweep.SweepRun, "run_all", lambda self, todo: run_all(self, todo, overlap=False))
    SENT.clear()
    BUILT.clear()
    _RecordingWorker.log = []
    out = tmp_path / f"{name}.csv"
    outcome = sweep.execute(spec, sweep.RunOptions("cuda", out, jobs=1, gpus=tuple(gpus)))
    rows = [(r["variant"], r["params"], r["shape"], r["status"], r["error"]) for r in csv.DictReader(out.open())]
    return outcome, rows


SPACE_3 = SPACE.replace("ts: [8, 16]", "ts: [8, 16, 32]")


def _write(folder, text):
    path = folder / "feed.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("gpus", [(), (0, 1)])
def test_the_first_case_runs_before_the_last_kernel_is_built(monkeypatch, tmp_path, gpus):
    """One compile thread (--jobs 1), three kernels of 0.3 s: the first case goes out once its own kernel is built,
    about 0.6 s before the last one is; every case carries its own kernel."""
    outcome, rows = _sweep(monkeypatch, tmp_path, "overlap", gpus, space=SPACE_3)
    cases = [(t, case, comp) for t, kind, case, comp in SENT if kind == "case" and case.variant.source]
    assert len(cases) == 6 and len(BUILT) == 3
    assert all(comp.case == case for _, case, comp in cases)
    last_built = max(t for t, _ in BUILT)
    assert cases[0][0] < last_built - COMPILE_S, "the first case waited for every kernel"
    # each case was sent only after its own kernel was built
    built = {c: t for t, c in BUILT}
    assert all(t >= built[case] for t, case, _ in cases)
    st = outcome.compile
    assert (st.kernels, st.compiled, st.cached, st.failed, st.overlapped) == (3, 3, 0, 0, True)
    assert st.wall_s >= 3 * COMPILE_S - 0.05
    assert outcome.jobs == len([r for r in rows if r[3] != "SKIP"])


def test_the_kernels_compile_in_the_order_the_jobs_run(monkeypatch, tmp_path):
    """Several workers take the largest shape first (longest_first): its kernels are the first built."""
    _sweep(monkeypatch, tmp_path, "order", (0, 1), space=SPACE_3)
    sent = [case for _, kind, case, _ in SENT if kind == "case" and case.variant.source]
    assert [c for _, c in BUILT] == list(dict.fromkeys(sent))


@pytest.mark.parametrize("gpus", [(), (0, 1)])
def test_rows_are_those_of_a_sweep_that_compiles_first(monkeypatch, tmp_path, gpus):
    """TS=32 needs more registers than an H100 block holds once built: a SKIP row, never sent; on one worker the
    rows come in the plan's order, as when every kernel is compiled before the first case."""
    regs = {32: 128}  # 128 x 1,024 threads > 65,536
    _, overlapped = _sweep(monkeypatch, tmp_path, "on", gpus, registers=regs, space=SPACE_3)
    skipped_sent = [case for _, kind, case, _ in SENT if kind == "case" and case.param_dict.get("TS") == 32]
    _, first = _sweep(monkeypatch, tmp_path, "off", gpus, registers=regs, overlap=False, space=SPACE_3)
    assert not skipped_sent
    refused = [r for r in overlapped if r[1] == "TS=32"]
    assert len(refused) == 2 and all(r[3] == "SKIP" and "registers" in r[4] for r in refused)
    assert (overlapped if not gpus else sorted(overlapped)) == (first if not gpus else sorted(first))


def test_a_resumed_sweep_compiles_only_what_it_runs(monkeypatch, tmp_path):
    _sweep(monkeypatch, tmp_path, "resume")
    out = tmp_path / "resume.csv"
    n = len(out.read_text().splitlines())
    spec = config.load_sweep(tmp_path / "feed.yaml")
    monkeypatch.setattr(spec.workload, "compile", _slow_compile())
    BUILT.clear()
    outcome = sweep.execute(spec, sweep.RunOptions("cuda", out, jobs=1))
    assert outcome.jobs == 0 and outcome.resumed > 0 and not BUILT and len(out.read_text().splitlines()) == n


def test_a_compile_that_raises_is_the_cases_error_row(monkeypatch, tmp_path):
    spec = config.load_sweep(_write(tmp_path, SPACE))
    monkeypatch.setattr(sweep, "Worker", _CudaWorker)
    monkeypatch.setattr(sweep, "nvcc_path", lambda: "nvcc")

    def broken(arch, cases, jobs=None):
        raise NnbenchError("kernels_cu/x.cu: not UTF-8")
    monkeypatch.setattr(spec.workload, "compile", broken)
    SENT.clear()
    outcome = sweep.execute(spec, sweep.RunOptions("cuda", tmp_path / "e.csv", jobs=1))
    sent = [comp for _, kind, case, comp in SENT if kind == "case" and case.variant.source]
    assert sent and all("not UTF-8" in str(c) for c in sent)
    assert outcome.compile.failed == 2


# -- the overhead outside kernels is never negative ----------------------------------------------------
def test_a_worker_whose_kernel_time_passes_the_wall_time_shows_no_overhead():
    """Kernel time is read on the GPU's clock, wall time on the host's: a worker busy all the run can sum a little
    more of the one than of the other. Its share outside kernels is 0, never below; the other's is its own."""
    o = sweep.Outcome(path=None, jobs=8, run_s=10.0, wall_s=10.5, gpu_s=19.05, workers=2, worker_gpu_s=[10.05, 9.0])
    assert o.worker_overheads == [0.0, pytest.approx(0.1)]
    assert o.worker_outside_s == [0.0, pytest.approx(1.0)]
    skewed = sweep.Outcome(path=None, jobs=8, run_s=10.0, wall_s=10.0, gpu_s=20.1, workers=2)
    assert skewed.overhead == 0.0 and skewed.overhead_total == 0.0
    assert sweep.Outcome(path=None, jobs=8, run_s=10.0, wall_s=12.0, gpu_s=30.0, workers=4).overhead \
        == pytest.approx(0.25)


def test_two_threads_asking_for_one_kernel_run_one_nvcc(monkeypatch, tmp_path):
    """The background compile hands cases to several threads; two that need one kernel (the trainers' shared tile
    sets) build it once: the second waits and finds the first's cubin in the cache."""
    from nnbench import paths
    from nnbench.runtime import compile as cc

    runs = []

    def nvcc(cmd, **kwargs):
        runs.append(cmd)
        time.sleep(0.2)
        out = cmd[cmd.index("-o") + 1]
        open(out, "wb").close()
        return SimpleNamespace(returncode=0, stderr="", stdout="")

    monkeypatch.setattr(cc, "nvcc_path", lambda: "nvcc")
    monkeypatch.setattr(cc, "nvcc_version", lambda: "V0")
    monkeypatch.setattr(cc.subprocess, "run", nvcc)
    req = cc.CompileRequest.make(paths.KERNELS / "gemm/02_tiled.cu", {"TS": 16}, "sm_90")
    got = []
    threads = [threading.Thread(target=lambda: got.append(cc.compile_cubin(req, tmp_path))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(runs) == 1 and sorted(g.cached for g in got) == [False, True, True]


def test_an_up_front_compile_stays_out_of_the_run_time(monkeypatch, tmp_path):
    """Where the kernels are compiled first (an MPI pool), the run time starts after them, as it always did: the
    overhead outside kernels is the run's, not nvcc's. With the feed, the run starts at once."""
    first, _ = _sweep(monkeypatch, tmp_path, "off", overlap=False)
    assert first.compile.wall_s >= 2 * COMPILE_S and first.run_s < COMPILE_S and not first.compile.overlapped
