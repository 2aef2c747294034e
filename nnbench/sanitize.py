"""`--sanitize memcheck|racecheck|synccheck|initcheck`: each case once under NVIDIA's compute-sanitizer.

Design: the command's process plans its cases as always, and for each one starts itself again, as
`compute-sanitizer --tool TOOL --error-exitcode 99 --log-file LOG python -m nnbench <the same arguments>
--sanitize-child K`. The child runs only the K-th case (nnbench/harness.py counts them the same way in both), with
one sample and no energy window, and writes its record to the file NNBENCH_SANITIZE_RECORD names. One process per
case: a memcheck error can poison a CUDA context, and the sanitizer's report then belongs to that case alone.
Up to `--sanitize-jobs N` of these processes run at once (`in_order`), each with its own CUDA context on the same
GPU: nothing is timed, so they may share it; the rows still come in the cases' order. Each case's process leads a
session of its own (compute-sanitizer starts python as its child), so that Ctrl-C or SIGTERM in the parent kills
every process of the cases in flight, and the parent ends at once with the rows of the cases already done.

The parent's row (`verdict`): the sanitizer's first report line makes it FAIL with error "TOOL: <line>"; a
clean run keeps the child's verdict (PASS, or the FAIL of a wrong answer) with `sanitizer` = "sanitized: TOOL".
A sanitized row carries no timing: the instrumented launch is 10-100x slower than the kernel.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from nnbench import measure, paths
from nnbench.errors import NnbenchError

TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
HAZARD_EXIT = 99  # --error-exitcode: the child found something
RECORD_ENV = "NNBENCH_SANITIZE_RECORD"
CHILD_TIMEOUT_S = 1800.0  # racecheck on a 4096^3 GEMM step runs for minutes
# The child's timing: one sample, to run the case's launches under the sanitizer, not to time them; host-issued, so
# that no batch of samples is queued (measure's warm-up, its estimate, one sample and the audited last one: 4 launches).
CHILD_SETTINGS = measure.TimingSettings(**measure.ONE_SAMPLE, host_issued=True)
# The command line's --sanitize TOOL and its arguments, --sanitize-jobs N, or the child's --sanitize-child K.
MODE: dict = {"tool": None, "argv": None, "child": None, "jobs": None}
# The case processes at once by default: each holds a Python interpreter, a CUDA context and the sanitizer's
# shadow memory (about 1 GiB of host memory for memcheck), and the instrumented kernels are the slow part, not
# the host: past 8 the GPU is what the processes wait on.
MAX_DEFAULT_JOBS = 8
# The columns a sanitized row leaves empty: times and what follows from them.
UNTIMED = ("samples", "reps", "noise", "converged", "timing", "gflops", "gbs", "pct_peak", "pct_vendor", "speedup",
           "power_w", "energy_j", "energy_window_j", "energy_method", "gflops_per_j", "items_per_s", "items_per_j",
           "samples_per_s", "tflops", "sm_clock_mhz", "sm_clock_min_mhz", "mem_clock_mhz", "throttle")


def executable() -> str:
    """compute-sanitizer's path, or one line saying where it comes from."""
    found = shutil.which("compute-sanitizer")
    if not found:
        raise NnbenchError("--sanitize: compute-sanitizer is not on PATH (it ships with the CUDA toolkit, in "
                           "its bin/ folder; add that folder to PATH)")
    return found


def first_report(text: str) -> str | None:
    """The sanitizer's first report line ("Invalid __global__ write of size 4 bytes", "Error: Race reported
    between ..."), without its "=========" prefix; None for a clean log (its banner and 0-error summaries)."""
    for line in text.splitlines():
        if not line.startswith("========="):
            continue
        body = line.lstrip("=").strip()
        if not body or body.startswith("COMPUTE-SANITIZER") or _clean_summary(body):
            continue
        return body
    return None


def _clean_summary(body: str) -> bool:
    # "ERROR SUMMARY: 0 errors", "RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"
    head, _, rest = body.partition("SUMMARY:")
    return bool(head) and rest.strip().startswith("0 ")


def child_command(tool: str, argv: list[str], index: int, log: Path) -> list[str]:
    return [executable(), "--tool", tool, "--error-exitcode", str(HAZARD_EXIT), "--log-file", str(log),
            sys.executable, "-m", "nnbench", *argv, "--sanitize-child", str(index)]


def run_case(tool: str, argv: list[str], index: int, base: dict) -> dict:
    """The K-th case of the command `argv` under the sanitizer, as its row (`verdict`)."""
    with tempfile.TemporaryDirectory(prefix="nnbench-sanitize-") as d:
        log, out = Path(d) / "sanitizer.log", Path(d) / "record.json"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(paths.ROOT),
                                                                        os.environ.get("PYTHONPATH")])))
        env[RECORD_ENV] = str(out)
        children = getattr(_THREAD, "children", None) or Children()  # in_order's, or this call's own
        rc, said = children.run(child_command(tool, argv, index, log), env)
        # The report goes to the log; a sanitizer that cannot open it (or a stand-in) prints it instead.
        report = first_report(log.read_text(errors="replace") if log.exists() else "") or first_report(said)
        record = json.loads(out.read_text()) if out.exists() else None
    return verdict(base, tool, rc, report, record, said)


class Stopped(Exception):
    """A case's process not started: the run was interrupted."""


class Children:
    """The cases' processes in flight, so that an interrupted parent can end them: a worker thread waits in its
    process for up to CHILD_TIMEOUT_S, and the interpreter joins those threads at exit. Each process leads a session
    of its own, killed as a group: compute-sanitizer starts python as its child, and a kill of the sanitizer alone
    would leave that python on the GPU. A new session also keeps the terminal's Ctrl-C from the children: the
    parent answers it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.live: set[subprocess.Popen] = set()
        self.stopped = False

    def run(self, command: list[str], env: dict) -> tuple[int | None, str]:
        """(exit code, or None after CHILD_TIMEOUT_S; what it printed)."""
        with self.lock:  # no process starts after kill_all
            if self.stopped:
                raise Stopped()
            proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
            self.live.add(proc)
        try:
            out, err = proc.communicate(timeout=CHILD_TIMEOUT_S)
            return proc.returncode, out + err
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            proc.communicate()
            return None, f"no end after {CHILD_TIMEOUT_S:g} s"
        finally:
            with self.lock:
                self.live.discard(proc)

    def kill_all(self) -> None:
        with self.lock:
            self.stopped = True
            for proc in self.live:
                _kill_group(proc)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the session's group: its id is the leader's pid
    except (ProcessLookupError, PermissionError):
        pass  # already gone


_THREAD = threading.local()  # a worker thread of in_order's pool: its Children


def _adopt(children: Children) -> None:
    _THREAD.children = children


def default_jobs() -> int:
    return max(1, min(os.cpu_count() or 1, MAX_DEFAULT_JOBS))


def in_order(work: Iterable[dict | Callable[[], dict]], jobs: int) -> Iterator[dict]:
    """The rows of `work` in its order: a dict is a row already (a SKIP), a callable is a case's process, run on
    one of `jobs` threads (each waits on its process), so up to `jobs` cases are under the sanitizer at once. A
    row is yielded as soon as it and every row before it are done. On Ctrl-C or SIGTERM (KeyboardInterrupt) the
    cases' processes are killed, and the rows done but held back behind a slower case are yielded then, out of
    the cases' order, before the interrupt goes on: a resumed run skips them."""
    children = Children()
    pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="nnbench-sanitize", initializer=_adopt,
                              initargs=(children,))
    pending: deque[dict | Future] = deque()
    try:
        for item in work:
            pending.append(pool.submit(item) if callable(item) else item)
            while pending and (isinstance(pending[0], dict) or pending[0].done()):
                yield _row(pending.popleft())
        while pending:
            yield _row(pending.popleft())
    except KeyboardInterrupt:
        # which cases were done, before the kill: a killed case's row (ERROR, signal 9) is not its verdict
        done = [item for item in pending if isinstance(item, dict) or (item.done() and not item.cancelled()
                                                                       and item.exception() is None)]
        _stop(pool, children)
        for item in done:
            yield _row(item)
        raise
    finally:  # a reader that stops early (Ctrl-C, the first FAIL) starts no further case and leaves none running
        _stop(pool, children)


def _stop(pool: ThreadPoolExecutor, children: Children) -> None:
    children.kill_all()
    pool.shutdown(wait=False, cancel_futures=True)


def _row(item: dict | Future) -> dict:
    return item if isinstance(item, dict) else item.result()


def verdict(base: dict, tool: str, rc: int | None, report: str | None, record: dict | None, said: str = "") -> dict:
    rec = dict(base, **(record or {}))
    for key in UNTIMED:
        rec[key] = None
    for key in [k for k in rec if k.endswith(("_ms", "_us"))]:
        rec[key] = None
    if report is not None or rc == HAZARD_EXIT:
        rec.update(status="FAIL", error=f"{tool}: {report or f'exit {HAZARD_EXIT} without a report line'}",
                   sanitizer=f"{tool}: {report}")
    elif record is None or rc != 0:
        last = (said.strip().splitlines() or ["no output"])[-1]
        rec.update(status="ERROR", error=f"{tool}: the case's process ended with {rc}: {last}", sanitizer=None)
    else:
        rec["sanitizer"] = f"sanitized: {tool}"
    return rec


def write_child_record(rec: dict) -> None:
    """The child's one record, for its parent (JSON: the record's values are numbers, text, None)."""
    path = os.environ.get(RECORD_ENV)
    if path:
        Path(path).write_text(json.dumps(rec, default=str))
