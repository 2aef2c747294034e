"""A GPU worker in its own process, and the parent's handle on it, with a watchdog.

Why a process: a kernel that faults (illegal address, launch failure) leaves a sticky error that
poisons the CUDA context for good, and a kernel that hangs never returns. Either way the only cure
is a new process. The parent never touches CUDA; it sends one job at a time over a pipe and reads
back progress and a record. If the worker goes silent past the watchdog, the parent kills it; if it
dies, the parent sees the pipe close. Either way the parent records the case as failed, starts a
fresh worker, and goes on. Nothing already written to disk is touched.

Protocol (parent -> worker): first (backend, workload, settings, rtol, seed, env, first problem), whose
inputs and reference the worker builds on a thread at once (while the parent compiles); then
("run", job_id, Job) | ("load", job_id, [(Compiled, kernel)]) | None (exit).
Worker -> parent: ("hello", info) once, ("ready", 0, start-up phases) once it is ready for jobs,
then ("progress", job_id, what) and ("record", job_id, rec).
The parent may send the next job before it has written the last record (`submit`, then `wait`): the
job waits in the pipe, so the GPU never idles while the parent appends and fsyncs a row.

A worker on the backend `replay:PATH` runs no kernel: it answers each job with the record of the
same case in the finished result file PATH (nnbench/sweeps/replay.py), so strategies and the sweep itself
can be tested with no GPU.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection

from nnbench import paths
from nnbench.errors import NnbenchError

HELLO_TIMEOUT_S = 120.0  # importing PyCUDA and creating a context, on a cold machine


@dataclass
class Job:
    kind: str  # "case" or "vendor"
    shape: object  # the workload's problem
    case: object = None  # a Case, or the vendor row's name
    compiled: object = None  # a Compiled, a CompileError, or None for CPU variants
    next_shape: object = None  # the shape after this one's cases, to prepare in the background


def main(argv: list[str]) -> None:
    """`python -m nnbench.sweeps.worker IN_FD OUT_FD`: started by Worker, never by hand."""
    # Ctrl-C reaches the whole process group; the parent answers it (and kills this process), so
    # the worker ignores it rather than print its own traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    inbox = Connection(int(argv[0]), writable=False)
    conn = _Duplex(inbox, Connection(int(argv[1]), readable=False))
    try:
        serve(conn, *inbox.recv())
    except (EOFError, BrokenPipeError):
        pass  # the parent is gone: nobody is left to report to


class _Duplex:
    """Two one-way pipes as one connection."""

    def __init__(self, inbox: Connection, outbox: Connection) -> None:
        self.inbox, self.outbox = inbox, outbox

    def send(self, obj) -> None:
        self.outbox.send(obj)

    def recv(self):
        return self.inbox.recv()

    def poll(self, timeout: float) -> bool:
        return self.inbox.poll(timeout)

    def close(self) -> None:
        self.inbox.close()
        self.outbox.close()


def serve(conn, backend_name: str, workload: str, settings, rtol: float, seed: int, env_extra: dict,
          first=None) -> None:
    """The worker's main loop (runs in the child process)."""
    from nnbench import results
    from nnbench.runtime import open_backend
    from nnbench.workloads import session_for

    t0 = time.perf_counter()
    try:
        if backend_name.startswith("replay:"):
            from nnbench.sweeps import replay
            session = replay.ReplaySession.from_backend(backend_name, workload, env_extra)
            backend, env = None, session.env
        else:
            backend, _ = open_backend(backend_name)
            env = dict(results.environment(backend), **env_extra)
    except NnbenchError as e:
        conn.send(("error", str(e)))
        return
    if backend is None:
        conn.send(("hello", {"env": env, "device": session.device, "arch": session.arch}))
    else:
        # the device's free memory before any buffer of this sweep: the plan's largest problem is checked against it
        conn.send(("hello", {"env": env, "device": backend.device, "arch": backend.arch,
                             "free_memory": backend.free_memory()}))
        session = session_for(workload, backend, settings, rtol, seed, env)
    # Start-up, all while the parent compiles: each phase's end, in seconds from the worker's first
    # line (after Python and nnbench are imported), told to the parent once the worker is ready.
    ready = {"backend_s": time.perf_counter() - t0}
    if first is not None and hasattr(session, "prefetch"):  # built while cuBLAS loads and the parent compiles
        session.prefetch(first)
    session.warm_up()
    ready["vendor_s"] = time.perf_counter() - t0
    if backend is not None:  # the verifier and the blocking kernel, compiled on a cold cache
        backend.prime()
    ready["helpers_s"] = time.perf_counter() - t0
    if first is not None:  # its device buffers too, while the parent still compiles
        session.prepare(first, None)
    ready["first_problem_s"] = time.perf_counter() - t0
    ready["at"] = time.time()  # the parent's clock too: how long after it started this process
    conn.send(("ready", 0, ready))
    while True:
        msg = conn.recv()
        if msg is None:
            return
        kind, job_id, job = msg
        if kind == "load":
            t0 = time.perf_counter()
            for comp, kernel_name in job:
                backend.load(comp, kernel_name)
            conn.send(("record", job_id, {"load_s": time.perf_counter() - t0, "modules": len(job)}))
            continue
        conn.send(("progress", job_id, "preparing inputs"))
        t0 = time.perf_counter()
        session.prepare(job.shape, job.next_shape)
        setup_ms = 1e3 * (time.perf_counter() - t0)
        conn.send(("progress", job_id, "running"))
        rec = session.run_vendor(job.case, job.shape) if job.kind == "vendor" else session.run_case(
            job.case, job.shape, job.compiled)
        if rec is not None:
            rec["setup_ms"] = setup_ms
        conn.send(("record", job_id, rec))
        if rec is not None and rec.get("fault"):
            # The context is poisoned: every clean-up call would fail and print a warning. Leave at
            # once; the driver reclaims the context with the process, and the parent starts anew.
            conn.close()
            os._exit(0)


class WorkerDied(Exception):
    pass


class WorkerHung(Exception):
    pass


def child_env() -> dict:
    """The environment of a child interpreter that imports this checkout's nnbench."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(paths.ROOT), os.environ.get("PYTHONPATH")])))


def count_gpus() -> int:
    """CUDA GPUs on this machine (as CUDA_VISIBLE_DEVICES shows them), counted in a child interpreter so
    that this process never initialises CUDA: a sweep's parent only plans, compiles and writes, and its
    workers own the GPUs (a plain sweep's parent never calls cuInit; `--gpus N` should not either). 0
    without PyCUDA or a driver; a child that fails otherwise is one line naming what it said."""
    code = "from nnbench.runtime import device_count; print(device_count())"
    try:
        done = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True, text=True,
                              timeout=HELLO_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise NnbenchError(f"counting the CUDA GPUs took over {HELLO_TIMEOUT_S:.0f} s (a hung driver?)") from None
    said = done.stdout.split()
    if done.returncode or len(said) != 1 or not said[0].isdigit():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise NnbenchError(f"counting the CUDA GPUs failed (exit {done.returncode}): {last}")
    return int(said[0])


def spawn(module: str, share: int = 1) -> tuple[subprocess.Popen, _Duplex]:
    """`python -m MODULE IN_FD OUT_FD` and the parent's connection to it: a sweep's worker, or a soak's
    (nnbench/sweeps/soakpool.py). `share`: how many such children share this host's cores."""
    # A fresh interpreter through subprocess, not multiprocessing: a forked CUDA state is
    # undefined, and multiprocessing's spawn would re-import the caller's __main__ script.
    p2c_r, p2c_w = os.pipe()
    c2p_r, c2p_w = os.pipe()
    env = child_env()
    # BLAS builds the next shape's reference beside the timing loop: leave that loop two cores
    # (of this worker's share of the host).
    blas = str(max(1, (os.cpu_count() or 1) // max(1, share) - 2))
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(var, blas)
    proc = subprocess.Popen([sys.executable, "-m", module, str(p2c_r), str(c2p_w)],
                            pass_fds=(p2c_r, c2p_w), env=env, stdin=subprocess.DEVNULL)
    os.close(p2c_r)
    os.close(c2p_w)
    return proc, _Duplex(Connection(c2p_r, writable=False), Connection(p2c_w, readable=False))


class Worker:
    """The parent's side: start, hand over one job, wait for its record under the watchdog."""

    def __init__(self, backend_name: str, workload: str, settings, rtol: float, seed: int, env_extra: dict,
                 first=None, share: int = 1) -> None:
        """`first`: the problem to build at once; `share`: how many workers share this host's cores."""
        self.spawned = time.time()
        self.proc, self.conn = spawn("nnbench.sweeps.worker", share)
        self.conn.send((backend_name, workload, settings, rtol, seed, env_extra, first))
        self._next = 0
        self.ready: dict | None = None  # the worker's start-up phases (serve), once it has said
        try:
            kind, info = self._recv(HELLO_TIMEOUT_S)
        except (WorkerDied, WorkerHung) as e:
            self.kill()
            raise NnbenchError(f"the benchmark worker did not start: {e}") from None
        if kind == "error":
            self.kill()
            raise NnbenchError(info)
        self.info = info

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _recv(self, timeout: float):
        if not self.conn.poll(timeout):
            if not self.alive():
                raise WorkerDied(self._death())
            raise WorkerHung(f"no word from the worker for {timeout:g} s")
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            self._wait(5)
            raise WorkerDied(self._death()) from None

    def _wait(self, seconds: float) -> None:
        try:
            self.proc.wait(seconds)
        except subprocess.TimeoutExpired:
            pass

    def _death(self) -> str:
        code = self.proc.poll()
        if code is None:
            return "the worker stopped answering"
        if code < 0:
            try:
                return f"the worker was killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"the worker was killed by signal {-code}"
        return f"the worker exited with code {code}"

    def run(self, kind: str, payload, watchdog_s: float, on_progress=None):
        """Send one job; return its reply. Raises WorkerHung (after killing the worker) or WorkerDied."""
        return self.wait(self.submit(kind, payload), watchdog_s, on_progress)

    def submit(self, kind: str, payload) -> int:
        """Send one job without waiting: it queues in the pipe behind the one in flight."""
        self._next += 1
        try:
            self.conn.send((kind, self._next, payload))
        except (BrokenPipeError, OSError):
            raise WorkerDied(self._death()) from None
        return self._next

    def wait(self, job_id: int, watchdog_s: float, on_progress=None):
        """The reply to job `job_id`; the watchdog restarts with every message from the worker."""
        while True:
            try:
                msg = self._recv(watchdog_s)
            except WorkerHung:
                self.kill()
                raise
            if msg[0] == "progress" and on_progress:
                on_progress(msg[2])
            elif msg[0] == "ready":
                self.ready = msg[2]
            elif msg[0] == "record" and msg[1] == job_id:
                return msg[2]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.alive():
            try:
                self.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            self._wait(10)
        self.kill()

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()
        self._wait(10)
        self.conn.close()


if __name__ == "__main__":
    main(sys.argv[1:])
