"""`nnbench soak --gpus`: the seeds in contiguous slices, one worker process per GPU (or per CPU worker on the
CPU backend), each running soak.soak on its slice and streaming every row back as it is made, so the parent
writes one --json file and prints the failures as a one-process soak does.

The workers start as a sweep's do (worker.spawn: a fresh interpreter, pinned to its GPU through the backend's
name, `cuda:N`). The first compiles every case (nvcc on a cold cache) before the others start, so they find
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
    """The backend a slot's worker opens: pinned to its GPU as a sweep's worker is; the CPU backend as it is."""
    from nnbench.sweeps.sweep import pinned
    return backend if backend.startswith("cpu") else pinned(backend, gpus[slot])


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
        watchdog_s: float = WATCHDOG_S) -> soak_mod.Outcome:
    """Soak `seeds` over one worker per entry of `gpus` (CPU workers on the CPU backend); the Outcome of all
    together, its seeds and failures in the given seeds' order. `on_row(workload, seed, record)` as each row
    arrives; `on_hello(backend name)` once the first worker has opened its backend."""
    t0 = time.perf_counter()
    slots = [_Slot(worker_backend(backend, i, gpus), part) for i, part in enumerate(split(seeds, len(gpus)))]
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
                    _take(out, on_row, name, seed, rec)
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


def _take(out: soak_mod.Outcome, on_row, name: str, seed: int, rec: dict) -> None:
    out.rows += 1
    if on_row is not None:
        on_row(name, seed, rec)
    if rec.get("status") in ("FAIL", "ERROR"):
        out.failures.append(soak_mod.Failure(name, seed, rec))


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
    _take(out, on_row, name, seed, dict(workload=name, seed=seed, status="ERROR", error=f"the soak worker: {why}"))
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
