"""Workers for a sweep's jobs: one (the plain sweep), or one per GPU of the host (`--gpus`).

One worker: each next job is sent before the parent writes the last record (the worker finds it
waiting in its pipe), so appending, fsync'ing and drawing the progress bar never leave the GPU idle.
Several workers: one thread per worker takes jobs from a shared queue; every worker is pinned to its
own GPU (`cuda:N`: its context lives on that device only) and loads the kernels the parent compiled
once into the host's cache (a job goes out once its own kernel is built: `run`'s `resolve`). The
workers are started once, all at once (`start`), and each slot takes its first job as soon as its
own worker is ready, not once every worker is. Records come back to the caller's thread in the
order they finish, so one writer appends them all to one result file.

A worker that dies or goes silent past the watchdog is killed; its job comes back as an ERROR
record, and a fresh worker takes the next job (the same for every slot).
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable, Iterator

from nnbench.sweeps.worker import Job, Worker, WorkerDied, WorkerHung

Resolve = Callable[[Job], "dict | None"]


def failure(e: Exception) -> dict:
    kind = "watchdog" if isinstance(e, WorkerHung) else "worker died"
    return {"status": "ERROR", "error": f"{kind}: {e}"}


class WorkerPool:
    def __init__(self, make: Callable[[int], Worker], size: int, watchdog_s: float,
                 first: Worker | None = None, on_restart: Callable[[int], None] | None = None,
                 on_progress: Callable[[str], None] | None = None) -> None:
        self.make, self.size, self.watchdog_s = make, size, watchdog_s
        self.workers: list[Worker | None] = [first] + [None] * (size - 1)
        self.started = [first is not None] + [False] * (size - 1)
        self.on_restart = on_restart or (lambda pid: None)
        self.on_progress = on_progress
        self.restarts = 0
        self.ran_on: dict[int, int] = {}  # id(job) -> the slot whose worker answered it (per-worker kernel time)
        self.starting: dict[int, threading.Thread] = {}  # slot -> the thread starting its first worker

    def start(self) -> threading.Thread:
        """Start every slot's first worker at once, each on a thread (while the parent compiles); `run`
        waits, slot by slot, for the slot's own worker. The thread returned joins them all (for a caller
        that needs every worker). A worker that cannot start is left for its slot's first job to retry."""
        def go(slot: int) -> None:
            try:
                self._worker(slot)
            except Exception:  # noqa: BLE001 - reported when the slot's job tries again
                pass

        self.starting = {i: threading.Thread(target=go, args=(i,), daemon=True) for i in range(self.size)
                         if self.workers[i] is None}
        threads = list(self.starting.values())
        for t in threads:
            t.start()
        joiner = threading.Thread(target=lambda: [t.join() for t in threads], daemon=True)
        joiner.start()
        return joiner

    def _worker(self, slot: int) -> Worker:
        starting = self.starting.get(slot)
        if starting is not None and starting is not threading.current_thread():
            starting.join()  # the slot's first worker is on its way: not a second one beside it
        w = self.workers[slot]
        if w is None:
            w = self.workers[slot] = self.make(slot)
            if self.started[slot]:  # a replacement, not the slot's first worker
                self.restarts += 1
                self.on_restart(w.pid)
            self.started[slot] = True
        return w

    def _drop(self, slot: int, rec: dict | None = None, failed: bool = False) -> None:
        w = self.workers[slot]
        if w is not None and (failed or (rec is not None and rec.get("fault"))):
            w.kill() if failed else w.close()  # a fault leaves the context poisoned: the worker exits
            self.workers[slot] = None

    def run(self, jobs: list[Job], resolve: Resolve = lambda job: None) -> Iterator[tuple[Job, dict | None]]:
        """Each job's record (None: the vendor's library is absent), as jobs finish. `resolve(job)`, called on the
        slot's thread just before the job is sent: it may wait (for the job's kernel, still compiling) and fill
        the job in, and returns None to send it, or the record that stands for it (it is not sent)."""
        if not jobs:
            return iter(())
        return self._serial(jobs, resolve) if self.size == 1 else self._parallel(jobs, resolve)

    def _serial(self, jobs: list[Job], resolve: Resolve) -> Iterator[tuple[Job, dict | None]]:
        todo = deque(jobs)
        inflight: tuple[Job, int] | None = None
        while todo or inflight:
            if inflight is None:
                job = todo.popleft()
                if (answered := resolve(job)) is not None:
                    yield job, answered
                    continue
                try:
                    inflight = (job, self._worker(0).submit("run", job))
                except WorkerDied as e:
                    self._drop(0, failed=True)
                    yield job, failure(e)
                    continue
            job, job_id = inflight
            inflight = None
            try:
                rec = self.workers[0].wait(job_id, self.watchdog_s, self.on_progress)
            except (WorkerDied, WorkerHung) as e:
                self._drop(0, failed=True)
                yield job, failure(e)
                continue
            self._drop(0, rec)
            answered = None
            if todo and self.workers[0] is not None:  # the next job goes out before this record is written
                nxt = todo.popleft()
                if (answered := resolve(nxt)) is None:
                    try:
                        inflight = (nxt, self.workers[0].submit("run", nxt))
                    except WorkerDied:
                        self._drop(0, failed=True)
                        todo.appendleft(nxt)  # not its fault: it runs on a fresh worker
            yield job, rec
            if answered is not None:  # after the record before it: the plan's order
                yield nxt, answered

    def _parallel(self, jobs: list[Job], resolve: Resolve) -> Iterator[tuple[Job, dict | None]]:
        todo: queue.Queue = queue.Queue()
        for j in jobs:
            todo.put(j)
        done: queue.Queue = queue.Queue()

        def take():
            try:
                return todo.get_nowait()
            except queue.Empty:
                return None

        def send(i: int, job: Job) -> tuple[Job, int | None, dict | None]:
            """(job, its id, None) once sent, or (job, None, a record) where no worker took it: resolve's, or ERROR."""
            try:
                if (answered := resolve(job)) is not None:
                    return job, None, answered
                return job, self._worker(i).submit("run", job), None
            except WorkerDied as e:
                self._drop(i, failed=True)
                return job, None, failure(e)
            except Exception as e:  # noqa: BLE001 - a worker that cannot start: the job fails, the slot stops
                return job, None, {"status": "ERROR", "error": f"worker: {e}"}

        def slot(i: int) -> None:
            # Like the single worker: the slot's next job waits in its worker's pipe while this one runs.
            job = take()
            inflight = send(i, job) if job is not None else None
            while inflight is not None:
                job, job_id, rec = inflight
                if job_id is None:
                    done.put((job, rec))
                    if rec.get("status") == "ERROR" and str(rec.get("error")).startswith("worker:"):
                        break
                    job = take()
                    inflight = send(i, job) if job is not None else None
                    continue
                nxt = take()
                queued = send(i, nxt) if nxt is not None else None
                try:
                    rec = self.workers[i].wait(job_id, self.watchdog_s)
                    self._drop(i, rec)
                except (WorkerDied, WorkerHung) as e:
                    self._drop(i, failed=True)
                    rec = failure(e)
                if queued is not None and queued[1] is not None and self.workers[i] is None:
                    queued = send(i, queued[0])  # it was in the pipe of the worker that is gone: not its fault
                self.ran_on[id(job)] = i
                done.put((job, rec))
                inflight = queued
            done.put(None)

        threads = [threading.Thread(target=slot, args=(i,), daemon=True) for i in range(self.size)]
        for t in threads:
            t.start()
        finished = 0
        while finished < len(threads):
            item = done.get()
            if item is None:
                finished += 1
            else:
                yield item
        for t in threads:
            t.join()
        while not todo.empty():  # every slot's worker failed to start: what is left fails too
            yield todo.get_nowait(), {"status": "ERROR", "error": "worker: no worker could start"}

    def close(self) -> None:
        for i, w in enumerate(self.workers):
            if w is not None:
                w.close()
                self.workers[i] = None

    def kill(self) -> None:
        for i, w in enumerate(self.workers):
            if w is not None:
                w.kill()
                self.workers[i] = None


# -- beyond one host: MPI ranks through mpi4py.futures ---------------------------------------------
class MpiPool:
    """The same `run` over MPI: started as `mpiexec -n N python -m mpi4py.futures -m nnbench sweep
    CONFIG --mpi` (or `srun`), rank 0 runs the sweep and every other rank is a worker host of
    mpi4py.futures' MPIPoolExecutor. Each rank keeps one nnbench Worker process (the same watchdog
    and replacement as on one host) pinned to its GPU on its node; a kernel whose cubin is not in that
    node's cache is compiled there once (the cache is content-addressed and written atomically).

    A lost rank (its process or its node gone): on a healthy rank a job's two phases (inputs, then
    the case) are each cut off by the worker's watchdog, so a job dispatched to a rank and still
    unanswered after `LOST_AFTER` watchdog periods (the third covers a worker's restart and the pipe)
    is taken as lost and sent again; the pool's other ranks take it and every later job. If the rank
    was only slow, its late answer is dropped: the first answer is the one written. The MPI job must
    outlive a dead rank (`mpirun --enable-recovery`; under Slurm `srun --no-kill`, lab/journal/sweep.md);
    by default Open MPI ends the whole job, and a re-run of the same command resumes from the file.
    A job whose future raises (the rank failed, the pool broke) is sent again too. A job lost or
    failed `TRIES` times is an ERROR row."""

    LOST_AFTER = 3  # watchdog periods
    TRIES = 3

    def __init__(self, init: tuple, watchdog_s: float, on_restart: Callable[[int], None] | None = None,
                 on_lost: Callable[[Job], None] | None = None) -> None:
        try:
            from mpi4py.futures import MPIPoolExecutor
        except ImportError:
            from nnbench.errors import NnbenchError
            raise NnbenchError("--mpi needs mpi4py: pip install -e '.[mpi]' over a system MPI (Open MPI, "
                               "MPICH)") from None
        import socket
        self.executor = MPIPoolExecutor()
        self.size = max(1, self.executor.num_workers)
        self.init = (*init, socket.gethostname())
        self.watchdog_s = watchdog_s
        self.on_restart = on_restart or (lambda pid: None)
        self.on_lost = on_lost or (lambda job: None)
        self.restarts = 0
        self.requeued = 0  # jobs sent again because their rank was lost or failed

    def run(self, jobs: list[Job]) -> Iterator[tuple[Job, dict | None]]:
        import time
        from concurrent.futures import FIRST_COMPLETED, wait
        lost_after = self.LOST_AFTER * self.watchdog_s
        inflight: dict = {}  # future -> [job, tries, when its rank took it (None: still queued)]

        def send(job: Job, tries: int) -> None:
            try:
                fut = self.executor.submit(remote_run, self.init, job, self.watchdog_s)
            except Exception as e:  # noqa: BLE001 - a broken pool: no rank is left to take a job
                from nnbench.errors import NnbenchError
                raise NnbenchError(f"the MPI pool is broken ({e}); every case written is kept: run the same "
                                   "command again to resume") from None
            inflight[fut] = [job, tries, None]

        def again(job: Job, tries: int, why: str) -> tuple[Job, dict] | None:
            """Send the job again, or its ERROR record once it has had its tries."""
            if tries + 1 >= self.TRIES:
                return job, {"status": "ERROR", "error": f"MPI worker lost {self.TRIES} times: {why}"}
            self.requeued += 1
            send(job, tries + 1)
            return None

        for job in jobs:
            send(job, 0)
        while inflight:
            done, _ = wait(list(inflight), timeout=min(1.0, lost_after / 4), return_when=FIRST_COMPLETED)
            for fut in done:
                job, tries, _ = inflight.pop(fut)
                try:
                    rec, restarted = fut.result()
                except Exception as e:  # noqa: BLE001 - the rank is gone or broken: the job goes elsewhere
                    failed = again(job, tries, str(e) or type(e).__name__)
                    if failed is not None:
                        yield failed
                    continue
                if restarted:
                    self.restarts += 1
                    self.on_restart(restarted)
                yield job, rec
            now = time.monotonic()
            for fut, entry in list(inflight.items()):
                if entry[2] is None and fut.running():
                    entry[2] = now
                elif entry[2] is not None and now - entry[2] > lost_after:
                    del inflight[fut]  # its rank is lost: a late answer from it is dropped
                    self.on_lost(entry[0])
                    failed = again(entry[0], entry[1], f"no answer in {lost_after:g} s")
                    if failed is not None:
                        yield failed

    def close(self) -> None:
        # A lost rank never answers the shutdown: with a job re-queued, leave without waiting for it.
        self.executor.shutdown(wait=self.requeued == 0, cancel_futures=True)

    kill = close


def end_mpi_job(code: int) -> None:
    """End the whole MPI job from rank 0 once every record is written and the summary printed, after a
    rank was lost: MPI_Finalize (at exit) would wait for the lost rank, and the live ranks for more jobs."""
    import sys

    from mpi4py import MPI
    sys.stdout.flush()
    sys.stderr.flush()
    MPI.COMM_WORLD.Abort(code)


_RANK: dict = {}  # an MPI rank's own Worker, kept between jobs


def local_gpu(parent_host: str, count: int) -> int:
    """This rank's GPU on its node: its local rank, less one on the node that also runs rank 0 (the
    sweep's parent, which runs no job), modulo the node's GPUs."""
    import os
    import socket
    local = next((int(os.environ[v]) for v in ("OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID",
                                                "PMI_LOCAL_RANK") if os.environ.get(v, "").isdigit()), 0)
    if socket.gethostname() == parent_host:
        local -= 1
    return max(0, local) % max(1, count)


def remote_run(init: tuple, job: Job, watchdog_s: float) -> tuple[dict | None, int]:
    """One job on this MPI rank (runs in the rank's process): (record, pid of a fresh worker or 0)."""
    backend, workload, settings, rtol, seed, env_extra, parent_host = init
    fresh = 0
    if _RANK.get("worker") is None:
        name = backend
        if backend.partition(":")[0] in ("cuda", "auto"):
            from nnbench.runtime import device_count
            name = f"cuda:{local_gpu(parent_host, device_count())}"
        _RANK["worker"] = Worker(name, workload, settings, rtol, seed, env_extra)
        fresh = _RANK["worker"].pid if _RANK.get("started") else 0
        _RANK["started"] = True
    comp = job.compiled
    if comp is not None and hasattr(comp, "cubin") and not comp.cubin.exists():  # another node's cache
        from nnbench.runtime.compile import compile_cubin
        job.compiled = compile_cubin(comp.request)
    worker = _RANK["worker"]
    try:
        rec = worker.run("run", job, watchdog_s)
        if rec is not None and rec.get("fault"):
            worker.close()
            _RANK["worker"] = None
    except (WorkerDied, WorkerHung) as e:
        worker.kill()
        _RANK["worker"] = None
        rec = failure(e)
    return rec, fresh
