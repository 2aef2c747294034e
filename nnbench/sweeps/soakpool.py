"""`nnbench soak --gpus`: the seeds in contiguous slices, one per worker process, several workers per GPU
(`--workers-per-gpu`; on the CPU backend each "GPU" is a CPU worker), each running soak.soak on its slice and
streaming every row back as it is made, so the parent writes one --json file and prints the failures as a
one-process soak does.

The workers start as a sweep's do (worker.spawn: a fresh interpreter, pinned to its GPU through the backend's
name, `cuda:N`, each with a CUDA context of its own); worker i takes GPU i mod the GPU count, so the GPUs get
workers in turn. The first compiles every case (nvcc on a cold cache) before the others start, so they find
the cache warm instead of running the same nvcc side by side. A kernel fault poisons a worker's context: it
stops after that seed, and the parent starts a fresh worker for the rest of its slice. A worker that dies or
goes silent past the watchdog is one ERROR row for the workload and seed it had in hand, and the same. Ctrl-C
or SIGTERM in the parent kills every worker; the rows already written stay.

Protocol (parent -> worker): (backend, workloads, seeds, deadline) once. Worker -> parent: ("hello", backend
name) or ("error", line); ("compiled",); then per seed ("start", workload, seed) before each workload,
("row", workload, seed, record) for each row, ("seed", seed) after its last workload; ("done", stopped) last.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait

from nnbench.errors import NnbenchError
from nnbench.sweeps import soak as soak_mod
from nnbench.sweeps import worker as worker_mod

MODULE = "nnbench.sweeps.soakpool"
# A soak row is one launch of a tiny problem after its checks; a net's row, a few iterations. Minutes of silence
# from a worker that has compiled is a hang (a kernel that never returns), not work.
WATCHDOG_S = 300.0
# `--workers-per-gpu auto` on a GPU: one worker per core of the GPU's share of the host, at most this many. A soak
# row is a tiny launch between host work (Python, float64 references, audits), so the GPU waits on its host
# process and each worker adds a core's worth of rows; past the cores they only take turns. The cap bounds what
# the contexts cost where a host has many cores per GPU (each context holds device memory of its own, and the
# GPU time-slices between contexts): 16 is the share of a 2 x H200 host (32 cores, 2 GPUs), the layout the soak
# is sized for; more per GPU is unmeasured.
AUTO_CAP = 16


def auto_workers_per_gpu(gpus: int, backend: str, cores: int | None = None) -> int:
    """`--workers-per-gpu auto`: the GPUs' share of the host's cores, each, up to AUTO_CAP; 1 on the CPU backend,
    whose `--gpus N` already counts its workers."""
    if backend.startswith("cpu"):
        return 1
    cores = cores if cores is not None else (os.cpu_count() or 1)
    return max(1, min(AUTO_CAP, cores // max(1, gpus)))


def split(seeds: list[int], parts: int) -> list[list[int]]:
    """Contiguous slices of `seeds`, as even as can be (the first ones one longer), none empty: at most one
    slice per seed, so `--gpus 8` over 3 seeds starts 3 workers."""
    parts = max(1, min(parts, len(seeds)))
    size, extra = divmod(len(seeds), parts)
    out, at = [], 0
    for i in range(parts):
        n = size + (1 if i < extra else 0)
        out.append(seeds[at:at + n])
        at += n
    return out


def worker_backend(backend: str, slot: int, gpus: list[int]) -> str:
    """The backend slot `slot`'s worker opens: pinned to GPU gpus[slot mod len(gpus)] as a sweep's worker is (the
    GPUs take the slots in turn, so every GPU has as many workers as the next, give or take one); the CPU
    backend as it is."""
    from nnbench.sweeps.sweep import pinned
    return backend if backend.startswith("cpu") else pinned(backend, gpus[slot % len(gpus)])


@dataclass
class _Slot:
    backend: str
    todo: list[int]  # its seeds that have not finished, in order
    ran: list[int] = field(default_factory=list)
    proc: subprocess.Popen | None = None
    conn: worker_mod._Duplex | None = None
    hand: tuple[str, int] | None = None  # (workload, seed) its worker is running
    compiled: bool = False  # its worker has compiled (the watchdog runs from then on)
    heard: float = 0.0  # time.monotonic() of its worker's last message


def run(backend: str, gpus: list[int], names: list[str], seeds: list[int], deadline: float | None = None,
        on_row: Callable[[str, int, dict], None] | None = None, on_hello: Callable[[str], None] | None = None,
        watchdog_s: float = WATCHDOG_S, per_gpu: int = 1) -> soak_mod.Outcome:
    """Soak `seeds` over `per_gpu` workers per entry of `gpus` (CPU workers on the CPU backend), one contiguous
    slice of the seeds each; the Outcome of all together, its seeds and failures in the given seeds' order.
    `on_row(workload, seed, record)` as each row arrives; `on_hello(backend name)` once the first worker has
    opened its backend."""
    t0 = time.perf_counter()
    slots = [_Slot(worker_backend(backend, i, gpus), part)
             for i, part in enumerate(split(seeds, len(gpus) * per_gpu))]
    out = soak_mod.Outcome()
    share, hello, waiting = len(slots), [False], slots[1:]  # the others start once the first has compiled
    try:
        _start(slots[0], names, deadline, share)
        while any(s.conn is not None for s in slots):
            live = {s.conn.inbox: s for s in slots if s.conn is not None}
            for inbox in wait(list(live), timeout=min(watchdog_s, worker_mod.HELLO_TIMEOUT_S)):
                s = live[inbox]
                try:
                    msg = s.conn.recv()
                except (EOFError, OSError):
                    _lost(s, out, on_row, names, deadline, share, _death(s))
                    continue
                s.heard = time.monotonic()
                kind = msg[0]
                if kind == "error":
                    raise NnbenchError(msg[1])
                if kind == "hello" and not hello[0]:
                    hello[0] = True
                    if on_hello is not None:
                        on_hello(msg[1])
                elif kind == "compiled":
                    s.compiled = True
                    for other in waiting:
                        _start(other, names, deadline, share)
                    waiting = []
                elif kind == "start":
                    s.hand = (msg[1], msg[2])
                elif kind == "row":
                    _, name, seed, rec = msg
                    out.take(name, seed, rec, on_row)
                elif kind == "seed":
                    s.ran.append(s.todo.pop(0))
                    s.hand = None
                elif kind == "done":
                    _close(s)
                    if msg[1] == "fault" and s.todo:
                        _start(s, names, deadline, share)  # the rest of its slice, on a fresh context
            now = time.monotonic()
            for s in slots:
                if s.conn is not None and s.compiled and now - s.heard > watchdog_s:
                    _lost(s, out, on_row, names, deadline, share, f"no word from it for {watchdog_s:g} s")
    finally:
        for s in slots:
            _kill(s)
    order = {seed: i for i, seed in enumerate(seeds)}
    out.seeds = sorted((seed for s in slots for seed in s.ran), key=order.__getitem__)
    out.failures.sort(key=lambda f: (order[f.seed], names.index(f.workload)))
    if any(s.todo for s in slots):
        out.stopped = "time"  # every other way a worker ends takes its slice on to the end
    out.seconds = time.perf_counter() - t0
    return out


def _start(s: _Slot, names: list[str], deadline: float | None, share: int) -> None:
    s.proc, s.conn = worker_mod.spawn(MODULE, share)
    s.hand, s.compiled, s.heard = None, False, time.monotonic()
    s.conn.send((s.backend, names, list(s.todo), deadline))


def _lost(s: _Slot, out: soak_mod.Outcome, on_row, names, deadline, share, why: str) -> None:
    """A worker that died or hung: one ERROR row for what it had in hand, and a fresh worker for the rest of its
    slice. One that had no seed in hand made no progress, so starting another would only do the same again."""
    _kill(s)
    if s.hand is None:
        raise NnbenchError(f"the soak worker on {s.backend} stopped before a seed: {why}")
    name, seed = s.hand
    out.take(name, seed, dict(workload=name, seed=seed, status="ERROR", error=f"the soak worker: {why}"), on_row)
    s.ran.append(s.todo.pop(0))
    if s.todo:
        _start(s, names, deadline, share)


def _death(s: _Slot) -> str:
    try:
        code = s.proc.wait(5)
    except subprocess.TimeoutExpired:
        return "it stopped answering"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"it exited with code {code}"


def _close(s: _Slot) -> None:
    try:
        s.proc.wait(10)
    except subprocess.TimeoutExpired:
        pass  # said done but lingers: killed below
    _kill(s)


def _kill(s: _Slot) -> None:
    if s.proc is not None and s.proc.poll() is None:
        s.proc.kill()
        s.proc.wait()
    if s.conn is not None:
        s.conn.close()
    s.proc, s.conn = None, None


# -- the worker's side ------------------------------------------------------------------------------
def main(argv: list[str]) -> None:
    """`python -m nnbench.sweeps.soakpool IN_FD OUT_FD`: started by `run`, never by hand."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group; the parent answers it
    inbox = Connection(int(argv[0]), writable=False)
    conn = worker_mod._Duplex(inbox, Connection(int(argv[1]), readable=False))
    try:
        serve(conn, *inbox.recv())
    except (EOFError, BrokenPipeError):
        pass  # the parent is gone: nobody is left to report to


def serve(conn, backend_name: str, names: list[str], seeds: list[int], deadline: float | None) -> None:
    from nnbench import results
    from nnbench.runtime import open_backend
    try:
        backend, _ = open_backend(backend_name)
        conn.send(("hello", backend.name))
        prepared = soak_mod.prepare(backend, names)
    except NnbenchError as e:
        conn.send(("error", str(e)))
        return
    conn.send(("compiled",))
    out = soak_mod.soak(backend, names, seeds, lambda name, seed, rec: conn.send(("row", name, seed, rec)),
                        env=results.environment(backend), deadline=deadline, prepared=prepared,
                        on_start=lambda name, seed: conn.send(("start", name, seed)),
                        on_seed=lambda seed: conn.send(("seed", seed)))
    conn.send(("done", out.stopped))
    conn.close()
    if out.stopped == "fault":
        os._exit(0)  # the context is poisoned: clean-up would only fail and print warnings


if __name__ == "__main__":
    main(sys.argv[1:])
