"""A sweep: a config's cases over its shapes, compiled in parallel, run in a replaceable worker,
streamed to a CSV that a re-run resumes.

The order of work, and why:
1. Start the worker first: it owns the GPU and says which arch to compile for and what the
   device's limits are. The parent process never touches CUDA, so it survives any kernel.
2. Refuse what cannot run here (wrong backend, threads, static shared memory) as SKIP rows.
3. Compile every distinct (source, params, arch) in parallel, one nvcc per core, into the
   content-addressed cache: in the background, in the order the jobs run, while the first cases
   run (nnbench/sweeps/feed.py; each job waits for its own kernel only), or all first where an MPI
   pool or a search runs them. After ptxas reports registers, refuse what needs more registers per
   block than the device has (SKIP, in the case's place). A failed compile is an ERROR row for its cases.
4. Run the rest one job at a time: per shape, cuBLAS first, then the baseline, then the swept
   cases, so each record can carry % of cuBLAS and speedup the moment it is written.
Every record is appended to the CSV and fsync'ed before the next job starts. A re-run of the same
sweep on the same GPU finds the newest matching CSV and skips every case already in it.
"""

from __future__ import annotations

import csv
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from nnbench import memory, paths, results, safeio
from nnbench.errors import CompileError, NnbenchError
from nnbench.harness import Comparisons
from nnbench.runtime import provenance
from nnbench.runtime.compile import nvcc_path, usable_cache
from nnbench.runtime.device import for_arch
from nnbench.sweeps import strategies
from nnbench.sweeps.config import SweepSpec
from nnbench.sweeps.feed import KernelFeed, children_cpu_s, feed_jobs
from nnbench.sweeps.pool import MpiPool, WorkerPool
from nnbench.sweeps.worker import Job, Worker

Events = Callable[..., None]


@dataclass
class CompileStats:
    kernels: int = 0  # distinct (source, params, arch)
    cached: int = 0
    compiled: int = 0
    failed: int = 0
    skipped: int = 0  # beyond the device's limits: never compiled
    jobs: int = 1
    wall_s: float = 0.0
    nvcc_cpu_s: float = 0.0  # user + system time of every nvcc and its children
    load_s: float | None = None  # loading every cubin into the worker's context
    overlapped: bool = False  # compiled in the background while the first cases ran (nnbench/sweeps/feed.py)
    arch: str = ""

    @property
    def cpu_per_core_s(self) -> float:
        return self.nvcc_cpu_s / max(1, self.jobs)

    @property
    def wall_vs_ideal(self) -> float | None:
        """Compile wall time over (nvcc CPU time / cores): 1.0 is perfect parallel scaling."""
        return self.wall_s / self.cpu_per_core_s if self.compiled and self.cpu_per_core_s > 0 else None


@dataclass
class Outcome:
    path: Path
    backend: str = "cuda"
    replayed: Path | None = None  # answered from this result file: no kernel ran
    resumed: int = 0  # cases already in the file
    stale: int = 0  # cases in the file whose provenance changed since (run again)
    jobs: int = 0  # jobs run now
    skipped: int = 0
    failed: int = 0
    restarts: int = 0
    requeued: int = 0  # jobs sent again because their MPI rank was lost or failed
    wall_s: float = 0.0  # the whole sweep: worker start, compile, every job
    run_s: float = 0.0  # from the first job sent to the last record: an up-front compile excluded, one that overlaps
    # the first cases (a pool of this host's workers) included where a job waited for its kernel
    gpu_s: float = 0.0  # kernel time, summed over every worker
    workers: int = 1  # the workers that ran jobs side by side (--gpus N, MPI ranks)
    worker_s: float = 0.0  # the workers' own time per job (inputs, verification, timing), summed
    worker_gpu_s: list[float] = field(default_factory=list)  # kernel time per worker slot (several workers)
    first_record_s: float | None = None  # from the run's start to its first record (the worker getting ready)
    # the first worker's start-up phases (nnbench/sweeps/worker.py), seconds after its spawn
    startup: dict | None = None
    compile: CompileStats = field(default_factory=CompileStats)
    searches: list[dict] = field(default_factory=list)  # per shape, under a strategy: what it found
    summary: Summary | None = None

    @property
    def overhead(self) -> float | None:
        """The share of the run phase spent outside kernels, where kernel time is the event-timed GPU time of every
        launch of every case. Several workers each had the whole run: their kernel time, summed, is set against the
        run times the workers (else four GPUs' kernel time over one wall clock came out as -201.7%)."""
        return outside(self.gpu_s, self.run_s * self.workers) if self.run_s > 0 and self.jobs else None

    @property
    def worker_overheads(self) -> list[float]:
        """Per worker of several: the share of the run's wall time that worker spent outside its own kernels."""
        if self.run_s <= 0 or not self.jobs:
            return []
        return [outside(g, self.run_s) for g in self.worker_gpu_s]

    @property
    def worker_outside_s(self) -> list[float]:
        """Per worker of several: the seconds of the run's wall time outside its own kernels (never below 0)."""
        return [o * self.run_s for o in self.worker_overheads]

    @property
    def overhead_total(self) -> float | None:
        """The same share of the whole command's wall time: worker start and compilation included."""
        return outside(self.gpu_s, self.wall_s * self.workers) if self.wall_s > 0 and self.jobs else None


def outside(kernel_s: float, wall_s: float) -> float:
    """The share of `wall_s` outside `kernel_s`, never below 0. A worker runs one job at a time, so its kernels fit in
    the wall time, but the two are read on two clocks: kernel time on the GPU's (CUDA events, summed over thousands
    of samples, each read to about 0.5 us, and per-launch estimates times their launch counts), wall time on the
    host's. A worker busy all the run can so sum a little more kernel time than wall time; "less than no time
    outside kernels" is that error, not a saving, and is shown as 0."""
    return max(0.0, 1.0 - kernel_s / wall_s)


# -- the result file ------------------------------------------------------------------------------
def result_file(spec: SweepSpec, gpu: str, out: Path | None, fresh: bool) -> tuple[Path, bool]:
    """(path, resume). `--out` names the file; otherwise the newest results/<sweep>-<gpu>-*.csv is
    resumed, or a new timestamped one is made. An existing file is never overwritten."""
    if out is not None:
        out = Path(out)
        refuse_old_schema(out)
        if out.exists() and fresh:
            raise NnbenchError(f"--out {out}: the file exists and --fresh would overwrite it; name a new file")
        return out, out.exists()
    folder = results_dir(spec)
    if not fresh:
        prefix = f"{spec.name}-{results.slug(gpu)}-"
        olds = sorted(p for p in folder.glob(f"{prefix}*.csv") if p.name[len(prefix):len(prefix) + 1].isdigit())
        if olds and _schema(olds[-1]) == results.FIELDS_BEFORE_PROVENANCE:
            print(f"{olds[-1]}: written before results recorded their provenance: its cases run again, "
                  "into a new file", file=sys.stderr)
        elif olds:
            return olds[-1], True
    return folder / results.default_path(spec.name, gpu).name, False


def require_memory(spec: SweepSpec, free: int | None, gpu: str) -> None:
    """Refuse the sweep, before any case runs or any file is made, where its largest problem's device memory
    (the workload's estimate) does not fit what the worker's device has free (None: unknown, or host memory)."""
    need = memory.largest(spec.workload, spec.shapes)
    if need is not None:
        memory.require_device(free, need[2], f"{spec.path}: shape {need[0].label} on {gpu}", "smaller shapes")


def refuse_old_schema(out: Path) -> None:
    """A result file named to add to that this nnbench cannot resume, refused in one line before the plan is shown
    and before any case runs: a FIFO or a device (opening it would wait, or read forever), a file of another kind
    or of another nnbench's columns, or one written before rows recorded their provenance (every case in it would
    run again, and its columns cannot take a new row). An empty file is a new one."""
    safeio.readable(out, "result CSV")
    if not out.is_file() or out.stat().st_size == 0:
        return
    safeio.refuse_if_busy(out)  # also: a file this user cannot read, in one line
    header = _schema(out)
    if header == results.FIELDS_BEFORE_PROVENANCE:
        raise NnbenchError(f"--out {out}: written before results recorded their provenance, so every case in it "
                           "would run again and a new row cannot be added to its columns; name a new file")
    if header not in (results.FIELDS, results.FIELDS_BEFORE_WORKLOAD):
        raise NnbenchError(f"--out {out}: not a result CSV of this nnbench (its first line is not the header this "
                           "version writes: another program's file, a JSON file, one cut short, or another "
                           "version's); name a new file")


def results_dir(spec: SweepSpec) -> Path:
    """Where a sweep's files go by default: nnbench's results/ for its own workloads, ./results/ (the user's
    working directory) for a user's kernel config, whose results are the user's and not nnbench's checkout's."""
    return Path.cwd() / "results" if spec.workload_name == "kernel" else paths.RESULTS


def _schema(path: Path) -> list[str] | None:
    """A result CSV's header, or None where it has none that can be read."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            return next(csv.reader(f), None)
    except (OSError, UnicodeDecodeError, csv.Error):
        return None


def open_result_file(spec: SweepSpec, gpu: str, out: Path | None, fresh: bool) -> tuple[results.CsvSink, bool]:
    """The sweep's sink, locked before anything reads which cases are done: a second sweep on the
    same file is refused rather than running the same cases again. A default name is taken
    exclusively (two sweeps started in the same second get two files)."""
    path, resume = result_file(spec, gpu, out, fresh)
    mode = safeio.APPEND if resume else safeio.NEW if out is not None else safeio.UNIQUE
    return results.CsvSink(path, fields=results.FIELDS, mode=mode), resume


def _json_cases(path: Path, workload: str) -> set[str]:
    """The cases of `workload` the --json file holds. A case is done only when every sink holds it: a row the CSV
    took but the JSON file did not (a full disk between the two writes) runs again, so the JSON file is never
    left short of a case the CSV has."""
    from nnbench import rawresults
    if not path.exists() or path.stat().st_size == 0:
        return set()
    return {r.key for r in rawresults.load(path) if r.fields.get("workload") == workload}


def _done_rows(path: Path):
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            # a file of the schema before the workload column's rename: its rows are read in today's names, and a
            # row added goes into the same column, whose header says `suite`
            if reader.fieldnames not in (results.FIELDS, results.FIELDS_BEFORE_WORKLOAD):
                raise NnbenchError(f"{path}: written with another result schema; start anew with --fresh")
            for row in reader:
                # A row cut short by a kill has no valid status; its case simply runs again.
                if row.get("status") in results.STATUSES:
                    try:
                        yield results.upgrade_row(results.parse_row(row))
                    except NnbenchError as e:
                        raise NnbenchError(f"{path}:{reader.line_num}: {e}") from None
    except (UnicodeDecodeError, csv.Error) as e:
        raise NnbenchError(f"{path}: not a result CSV ({e}); start anew with --fresh") from None
    except OSError as e:
        raise safeio.os_problem(path, e, "cannot read") from None


# -- the summary, kept flat: the best record per (shape, variant), never every record ------------
class Summary:
    KEEP = ("variant", "params", "shape", "median_ms", "iqr_ms", "timing", "gflops", "pct_peak", "pct_vendor",
            "speedup", "speedup_over", "status", "unit", "vendor", "step")

    def __init__(self, shapes: list[str] = ()) -> None:
        self.best: dict[tuple[str, str], dict] = {}
        self.tally: dict[tuple[str, str], dict[str, int]] = {}
        self.shapes: list[str] = list(shapes)  # the config's order, whatever order they ran in

    def add(self, rec: dict) -> None:
        shape, variant = rec.get("shape", ""), rec.get("variant", "")
        if shape not in self.shapes:
            self.shapes.append(shape)
        t = self.tally.setdefault((shape, variant), {})
        t[rec.get("status", "")] = t.get(rec.get("status", ""), 0) + 1
        if rec.get("status") in results.TIMED and rec.get("median_ms"):  # the reference's time shown, never starred
            cur = self.best.get((shape, variant))
            if cur is None or rec["median_ms"] < cur["median_ms"]:
                self.best[(shape, variant)] = {k: rec.get(k) for k in self.KEEP}

    def rows(self) -> list[dict]:
        """Per shape, each variant's best, fastest first; `best` marks the fastest nnbench kernel."""
        out = []
        for shape in self.shapes:
            keys = [k for k in self.tally if k[0] == shape]
            rows = []
            for k in keys:
                row = dict(self.best.get(k) or {"variant": k[1], "shape": shape, "params": ""})
                row["tally"] = self.tally[k]
                rows.append(row)
            rows.sort(key=lambda r: r.get("median_ms") or float("inf"))
            ours = [r for r in rows if str(r.get("step", "")) not in ("", "None") and r.get("median_ms")
                    and r.get("status") == "PASS"]
            for r in rows:
                r["best"] = bool(ours) and r is ours[0]
            out += rows
        return out


# -- the sweep ------------------------------------------------------------------------------------
def plan_jobs(spec: SweepSpec, with_vendor: bool, backend: str) -> list[Job]:
    """Smallest problem first: the first problem's inputs and reference are built while nothing
    else runs, and every later one is built in the background while the GPU times the one before.
    Per problem, the vendor rows first, then the cases (the baseline first among them)."""
    work = spec.workload
    jobs = []
    for problem in sorted(spec.shapes, key=lambda s: s.flops):
        if with_vendor:
            jobs += [Job("vendor", problem, name) for name in work.vendor_names(backend)
                     if work.vendor_wanted(name, spec.cases)]
        jobs += [Job("case", problem, case) for case in spec.cases if work.applies(case, problem)]
    return jobs


def longest_first(jobs: list[Job], env: dict | None = None) -> list[Job]:
    """Jobs in the order several workers should take them from their shared queue: the longest expected case
    first, so that the run ends on short cases rather than one long one with the other workers idle (longest
    processing time first); the plan's order within a shape. The expected time is the shape's roofline time on
    the device (`env`'s FP32 and DRAM peaks: a memory-bound shape of few FLOPs can outlast a larger
    compute-bound one), or its FLOPs where the peaks are unknown (the CPU backend)."""
    return sorted(jobs, key=lambda j: -expected_s(j.shape, env))


def expected_s(shape, env: dict | None = None) -> float:
    """A shape's expected time per launch: max(FLOPs / FP32 peak, bytes / DRAM peak); its FLOPs without peaks."""
    flops, moved = getattr(shape, "flops", 0) or 0, getattr(shape, "bytes", 0) or 0
    tflops, gbs = (env or {}).get("fp32_peak_tflops"), (env or {}).get("dram_peak_gbs")
    if not tflops or not gbs:
        return float(flops)
    return max(flops / (tflops * 1e12), moved / (gbs * 1e9))


def first_problem(spec: SweepSpec, workers: int, searching: bool):
    """The problem every worker runs first, to build while it starts: the smallest in the plan's order (one
    worker, or a search, which goes shape by shape from the smallest), else the largest by FLOPs: longest_first's
    first where the device's peaks are unknown, as they are before the first worker says what the device is."""
    pick = min if workers == 1 or searching else max
    return pick(spec.shapes, key=lambda s: s.flops)


def link_shapes(jobs: list[Job]) -> None:
    """Tell each job which problem comes after its own, so the worker can prepare it early."""
    following = None
    for i in range(len(jobs) - 1, -1, -1):
        jobs[i].next_shape = following
        if i > 0 and jobs[i - 1].shape != jobs[i].shape:
            following = jobs[i].shape


def job_key(spec: SweepSpec, job: Job) -> str:
    if job.kind == "vendor":
        return results.case_key(spec.workload_name, job.case, "", job.shape.label, spec.settings.cold)
    return results.case_key(spec.workload_name, job.case.variant.name, job.case.param_label, job.shape.label,
                            spec.settings.cold)


def _base_record(spec: SweepSpec, job: Job, env: dict) -> dict:
    from nnbench.workloads.base import problem_text
    rec = dict(env, workload=spec.workload_name, sweep=spec.name, shape=job.shape.label,
               problem=problem_text(job.shape), flops=job.shape.flops, bytes=job.shape.bytes, rtol=spec.rtol,
               cold=spec.settings.cold, seed=spec.seed, unit=spec.workload.unit)
    if job.kind == "vendor":
        return provenance.stamp(dict(rec, variant=job.case, step="", params=""), None, env)
    v = job.case.variant
    return provenance.stamp(dict(rec, variant=v.name, step=v.step, params=job.case.param_label,
                                 precision=v.precision), v, env)


def job_provenance(spec: SweepSpec, job: Job, env: dict) -> str:
    """The provenance a row of `job` would carry now: a done row with another one runs again."""
    return provenance.digest(None if job.kind == "vendor" else job.case.variant, env)


def pinned(backend: str, gpu: int) -> str:
    """The backend name of a worker pinned to `gpu`: `backend` itself where it already opens that GPU
    (`cuda` opens GPU 0, `cuda:2` GPU 2), so that `--gpus 1` starts the very worker a plain sweep
    starts, with the same arguments; `name:gpu` otherwise."""
    name, _, ordinal = backend.partition(":")
    return backend if (int(ordinal) if ordinal.isdigit() else 0) == gpu else f"{name}:{gpu}"


def compile_only(spec: SweepSpec, arch: str, jobs: int | None = None) -> CompileStats:
    """Compile the sweep's kernels for `arch` without a GPU (the cold-cache benchmark, CI). Cases
    beyond the arch's documented limits are left out, as a run on that GPU would skip them."""
    limits = for_arch(arch)
    kernels = [c for c in spec.cases if c.variant.source]
    cases = [c for c in kernels if not c.variant.device_problems(c.param_dict, limits)]
    stats, _ = _compile(spec.workload, cases, arch, jobs)
    stats.skipped = len(kernels) - len(cases)
    return stats


def _compile(work, cases, arch: str, jobs: int | None):
    """The workload's compile, timed: wall time, and the CPU time of every nvcc it ran."""
    cases = list(cases)
    distinct = len({(c.variant.source, c.params) for c in cases})
    stats = CompileStats(kernels=distinct, jobs=max(1, min(jobs or os.cpu_count() or 1, distinct or 1)), arch=arch)
    before = children_cpu_s()
    t0 = time.perf_counter()
    compiled = work.compile(arch, cases, jobs=stats.jobs)
    stats.wall_s = time.perf_counter() - t0
    stats.nvcc_cpu_s = children_cpu_s() - before
    return _tally(stats, compiled), compiled


def _feed_stats(feed: KernelFeed, arch: str) -> CompileStats:
    """The background compile's stats, in the up-front compile's terms; its wall time overlapped the run."""
    compiled = feed.wait_all()
    stats = CompileStats(kernels=len({(c.variant.source, c.params) for c in feed.cases}), jobs=feed.jobs, arch=arch,
                         wall_s=feed.wall_s, nvcc_cpu_s=feed.nvcc_cpu_s, overlapped=True)
    # one entry per distinct kernel, as work.compile of them all gives one result object per kernel
    by_kernel = {(c.variant.source, c.params): comp for c, comp in compiled.items()}
    return _tally(stats, dict(enumerate(by_kernel.values())))


def _tally(stats: CompileStats, compiled: dict) -> CompileStats:
    """Count the compile's results: failed, served from the cache, built now."""
    for comp in {id(c): c for c in compiled.values()}.values():  # one result object per distinct kernel
        if isinstance(comp, CompileError):
            stats.failed += 1
        elif comp is None:  # a workload that only fills the cache (the trainers) says nothing per kernel
            continue
        elif comp.cached:
            stats.cached += 1
        else:
            stats.compiled += 1
    return stats


@dataclass(frozen=True)
class RunOptions:
    """How a sweep runs, as `nnbench sweep`, `nnbench check --run` and `nnbench.run_sweep` ask for it.
    `append`: a later part of a config of several parts adds to `out`, the file the first part made.
    `retry_errors`: on a resume, cases whose last row is ERROR run again. `gpus`: one worker per listed GPU
    (nnbench/sweeps/pool.py); `mpi`: one per MPI rank (this process is rank 0 under `python -m mpi4py.futures`).
    `replay`: a finished result file answers every case (nnbench/sweeps/replay.py), each answer after
    `replay_sleep_ms` or its own time times `replay_scale`; nothing is compiled and no GPU is used.
    `load_only`: compile and load the kernels, then stop."""

    backend: str = "cuda"
    out: Path | None = None
    fresh: bool = False
    append: bool = False
    retry_errors: bool = False
    json_out: Path | None = None
    jobs: int | None = None  # nvcc processes at once (None: one per core)
    load_only: bool = False
    gpus: tuple[int, ...] = ()
    replay: Path | None = None
    replay_sleep_ms: float = 0.0
    replay_scale: float = 0.0
    mpi: bool = False


def execute(spec: SweepSpec, opts: RunOptions = RunOptions(), events: Events | None = None) -> Outcome:
    """Run the sweep (or, with `opts.load_only`, compile and load its kernels and stop). See the module's doc.
    `Outcome.failed` counts every case of the file (of this part's workload) whose last row failed, not
    only this run's. The stages: the backend (`run_backend`), the first worker, the sinks (`open_sinks`),
    what is done (`read_done`), the plan (`plan_jobs`, `pending`, `refusals`), the runner (`choose_runner`),
    the run and its records (`SweepRun`), the summary (`summarise`)."""
    emit = events or (lambda *a, **k: None)
    t_start = time.perf_counter()
    backend = run_backend(spec, opts)
    runner = choose_runner(opts)
    searching = spec.strategy != "brute_force" or spec.budget != strategies.Budget()
    # under MPI the first worker only says what the device is: it builds no problem
    lead = None if opts.mpi else first_problem(spec, len(opts.gpus) or 1, searching)
    make_worker = worker_factory(spec, backend, opts.gpus, lead)
    worker = make_worker(0)
    emit("worker", pid=worker.pid, restart=False)
    run = None
    try:
        info = worker.info
        env, device, arch = info["env"], info["device"], info["arch"]
        require_memory(spec, info.get("free_memory"), env.get("gpu") or "the GPU")  # before anything is made
        sink, path, resume = open_sinks(spec, opts, env["gpu"])
        outcome = Outcome(path, backend=env["backend"], replayed=opts.replay)
        on_gpu = env["backend"] == "cuda" and opts.replay is None  # a replay compiles nothing
        run = SweepRun(spec, env, device, arch, on_gpu, opts.jobs, sink, outcome, emit)
        done = read_done(path if resume else None, spec.workload_name, opts.retry_errors,
                         opts.json_out if resume else None, run.remember)
        run.last_status = dict(done.status)
        all_jobs = plan_jobs(spec, spec.vendor and env["backend"] == "cuda", env["backend"])
        todo, stale = pending(spec, all_jobs, done, env)
        outcome.resumed, outcome.stale = len(all_jobs) - len(todo), len(stale)
        run.skip = refusals(spec, all_jobs, env["backend"], device)
        if opts.load_only:
            return load_kernels(run, worker, todo)
        if runner == "mpi":
            worker.close()  # the ranks run every job; this GPU is theirs
            first_worker, worker = None, None
        else:
            first_worker = worker
        run.start_pool(runner, backend, make_worker, first_worker, len(todo), len(opts.gpus) or 1)
        worker = None  # the pool owns it now
        if searching:
            emit("compiled", stats=outcome.compile)
        run_started = time.time()
        try:
            if searching:
                run.search(all_jobs, done)
            else:
                run.run_all(todo)
        finally:
            sink.close()
        return summarise(outcome, run, first_worker, run_started, t_start)
    except KeyboardInterrupt:
        # Workers ignore Ctrl-C, so they print nothing; a case in flight is not waited for.
        if worker is not None:
            worker.kill()
            worker = None
        if run is not None and run.pool is not None:
            run.pool.kill()
            run.pool = None
        raise
    finally:
        if run is not None and run.sink is not None:
            run.sink.close()
        if worker is not None:
            worker.close()
        if run is not None and run.pool is not None:
            run.pool.close()


# -- the stages of `execute` ---------------------------------------------------------------------
def run_backend(spec: SweepSpec, opts: RunOptions) -> str:
    """The backend the workers open: the asked one, or a replay of a result file (checked against the sweep's
    space first). A strategy whose library is missing is refused before any worker starts."""
    if (why := strategies.available(spec.strategy)) is not None:
        raise NnbenchError(f"{spec.path}: {why}")
    if opts.replay is None:
        return opts.backend
    from nnbench.sweeps import replay as replay_mod
    replay_mod.check_space(spec, replay_mod.load(Path(opts.replay), spec.workload_name), Path(opts.replay))
    return replay_mod.backend_name(Path(opts.replay), opts.replay_sleep_ms, opts.replay_scale)


def choose_runner(opts: RunOptions) -> str:
    """Who runs the jobs: "load" (nobody: the kernels are loaded and the sweep stops), "mpi" (one worker per MPI
    rank) or "pool" (one worker per listed GPU, or one worker; a replay is a pool whose workers answer from a file)."""
    if opts.load_only:
        return "load"
    return "mpi" if opts.mpi else "pool"


def worker_factory(spec: SweepSpec, backend: str, gpus: tuple[int, ...], lead=None) -> Callable[[int], Worker]:
    """make(slot): the worker for one slot, pinned to its GPU of `gpus` (a replay or the CPU has none to pin). A
    slot's first worker builds `lead`, the problem it will run first, while it starts (a replacement's next job
    is anyone's)."""
    share = len(gpus) or 1
    prefetched: set[int] = set()

    def make(slot: int) -> Worker:
        name = pinned(backend, gpus[slot]) if gpus and not backend.startswith(("replay:", "cpu")) else backend
        prefetch = None if slot in prefetched else lead
        prefetched.add(slot)
        return Worker(name, spec.workload_name, spec.settings, spec.rtol, spec.seed, {"sweep": spec.name},
                      first=prefetch, share=share)
    return make


def open_sinks(spec: SweepSpec, opts: RunOptions, gpu: str) -> tuple[object | None, Path, bool]:
    """(sink, path, resume): the CSV, with the --json file beside it; none with load_only (nothing is written)."""
    if opts.load_only:
        path, resume = result_file(spec, gpu, opts.out, opts.fresh)
        return None, path, resume
    if opts.append:
        sink, resume = results.CsvSink(Path(opts.out), fields=results.FIELDS, mode=safeio.APPEND), True
    else:
        sink, resume = open_result_file(spec, gpu, opts.out, opts.fresh)
    path = sink.path
    if opts.json_out is not None:
        # the records with their raw samples (docs/JSON.md): added to where the CSV is added to
        from nnbench.rawresults import JsonSink
        try:
            json_sink = JsonSink(opts.json_out, safeio.APPEND if resume else safeio.NEW, flag=None)
        except BaseException:
            sink.close()  # a refused --json leaves nothing: the CSV just made, header only, goes with it
            raise
        sink = results.Sinks(sink, json_sink)
    return sink, path, resume


@dataclass
class Done:
    """What a resumed file already holds of one workload, per case key."""

    status: dict[str, str] = field(default_factory=dict)  # the status of each case's last row
    provenance: dict[str, str | None] = field(default_factory=dict)  # and its provenance (None: not kept then)
    median_ms: dict[str, float | None] = field(default_factory=dict)  # its median (None: failed), for a search
    keys: set[str] = field(default_factory=set)  # the cases that need not run again (provenance aside)


def read_done(path: Path | None, workload: str, retry_errors: bool, json_out: Path | None,
              seen: Callable[[dict], None] = lambda row: None) -> Done:
    """The cases of `workload` in the file at `path` (None: a new file), each row also handed to `seen`. A case whose
    last row is ERROR is not done with `retry_errors`; with `json_out`, a case is done only where that file
    holds it too."""
    done = Done()
    if path is None or not path.exists():
        return done
    for row in _done_rows(path):
        if row.get("workload") != workload:
            continue
        key = results.case_key_of(row)
        done.status[key] = row["status"]
        done.provenance[key] = row.get("provenance")
        done.median_ms[key] = row.get("median_ms") if row["status"] == "PASS" else None
        seen(row)
    done.keys = {k for k, st in done.status.items() if not (retry_errors and st == "ERROR")}
    if json_out is not None:
        done.keys &= _json_cases(Path(json_out), workload)
    return done


def pending(spec: SweepSpec, all_jobs: list[Job], done: Done, env: dict) -> tuple[list[Job], set[str]]:
    """(the jobs to run, the keys of the stale ones). A case whose kernel, headers, flags, nnbench or driver
    changed since its row is stale and runs again (an unchanged case's row is done; the gate still compares the
    two rows, whose case is the same)."""
    stale = {job_key(spec, j) for j in all_jobs if job_key(spec, j) in done.keys
             and done.provenance.get(job_key(spec, j)) != job_provenance(spec, j, env)}
    return [j for j in all_jobs if job_key(spec, j) not in done.keys or job_key(spec, j) in stale], stale


def refusals(spec: SweepSpec, all_jobs: list[Job], backend: str, device) -> dict[int, str]:
    """id(job) -> why: the cases this backend or device cannot run, refused before anything compiles."""
    work, skip = spec.workload, {}
    for j in all_jobs:
        if j.kind != "case":
            continue
        v = j.case.variant
        if not work.runs_on(v, backend):
            skip[id(j)] = f"{v.name} runs on the {v.backend} backend; this sweep runs on {backend}"
        elif device is not None and (why := v.device_problems(j.case.param_dict, device)):
            skip[id(j)] = why[0]
        elif why := work.refusal(j.case, j.shape):
            skip[id(j)] = why
    return skip


def load_kernels(run: SweepRun, worker: Worker, todo: list[Job]) -> Outcome:
    """load_only: compile the cases' kernels and load every one into the worker, timed; nothing runs."""
    run.outcome.compile = run.compile(todo)
    run.emit("compiled", stats=run.outcome.compile)
    kernels = {(c.cubin, c.request): (c, case.variant.kernel) for case, c in run.compiled.items()
               if not isinstance(c, CompileError)}
    reply = worker.run("load", list(kernels.values()), HELLO_WATCHDOG_S)
    run.outcome.compile.load_s = reply["load_s"]
    return run.outcome


def summarise(outcome: Outcome, run: SweepRun, first_worker: Worker | None, run_started: float,
              t_start: float) -> Outcome:
    """The outcome's totals once every job has run: failures over the whole file, restarts, start-up phases."""
    outcome.failed = sum(st in results.FAILED for st in run.last_status.values())
    outcome.restarts = run.pool.restarts
    outcome.requeued = getattr(run.pool, "requeued", 0)
    if first_worker is not None and first_worker.ready:
        phases = dict(first_worker.ready)
        at = phases.pop("at")
        outcome.startup = dict(phases, ready_s=at - first_worker.spawned,
                               run_start_s=run_started - first_worker.spawned)
    outcome.run_s = time.perf_counter() - run.t_run
    outcome.workers = run.slots
    outcome.wall_s = time.perf_counter() - t_start
    return outcome


class SweepRun:
    """The run and its records: compiles batches of jobs (SKIP what the device cannot hold), runs them on the pool,
    derives each record's comparisons and writes it to the sink, keeping the outcome's counts."""

    def __init__(self, spec: SweepSpec, env: dict, device, arch: str | None, on_gpu: bool, jobs: int | None, sink,
                 outcome: Outcome, emit: Events) -> None:
        self.spec, self.env, self.device, self.arch, self.on_gpu, self.jobs = spec, env, device, arch, on_gpu, jobs
        self.sink, self.outcome, self.emit = sink, outcome, emit
        self.summary = outcome.summary = Summary([s.label for s in spec.shapes])
        self.comparisons = Comparisons(spec.workload, spec.baseline)
        self.last_status: dict[str, str] = {}  # every case of this workload in the file: its last row's status
        self.skip: dict[int, str] = {}  # id(job) -> why it is refused
        self.compiled: dict = {}
        self.pool = None
        self.slots = 1
        self.t_run = time.perf_counter()

    def remember(self, row: dict) -> None:
        """A row already in the file: the comparisons and the summary count it."""
        self.comparisons.remember(row)
        self.summary.add(row)

    def start_pool(self, runner: str, backend: str, make_worker, first: Worker | None, todo: int, slots: int) -> None:
        """Start the runner's workers: the other GPUs' start while this process compiles, and each slot takes its
        first job once its own worker is ready (WorkerPool._worker)."""
        def restarted(pid: int) -> None:
            self.emit("worker", pid=pid, restart=True)
        spec = self.spec
        if runner == "mpi":
            self.pool = MpiPool((backend, spec.workload_name, spec.settings, spec.rtol, spec.seed,
                                 {"sweep": spec.name}), spec.watchdog_s, on_restart=restarted,
                                on_lost=lambda job: self.emit("lost", job=job))
            self.slots = self.pool.size
            return
        self.slots = max(1, min(slots, todo))  # a worker per job at most: --gpus 24 for 4 cases starts 4
        self.pool = WorkerPool(make_worker, self.slots, spec.watchdog_s, first=first, on_restart=restarted,
                               on_progress=lambda what: self.emit("phase", what=what))
        self.pool.start()

    def compile(self, batch: list[Job]) -> CompileStats:
        """Compile the batch's kernels in parallel; refuse (SKIP) what needs more registers than the device has."""
        cases = {j.case: None for j in batch if j.kind == "case" and id(j) not in self.skip and j.case.variant.source}
        if not self.on_gpu or not cases:
            return CompileStats(arch=self.arch or "")
        stats, got = _compile(self.spec.workload, cases, self.arch, self.jobs)
        self.compiled.update(got)
        for j in batch:
            if j.kind == "case" and (why := self.beyond_registers(j, self.compiled.get(j.case))):
                self.skip[id(j)] = why
        return stats

    def beyond_registers(self, j: Job, comp) -> str | None:
        """Why the compiled case cannot launch on the device, now that ptxas has said its registers (None: it can)."""
        if comp is None or isinstance(comp, CompileError):
            return None
        why = j.case.variant.device_problems(j.case.param_dict, self.device, self.spec.workload.registers(j.case, comp))
        return why[0] if why else None

    def run_all(self, todo: list[Job], overlap: bool = True) -> None:
        """Every job. With `overlap` (and a pool of this host's workers), the kernels compile in the background in
        the order the jobs run and each job waits for its own kernel only (nnbench/sweeps/feed.py); else they are
        all compiled first. Either way a case beyond the device's registers is a SKIP row in its place."""
        link_shapes(todo)
        feed = None
        order = [j.case for seg in self.segments(todo)[1] for j in seg
                 if j.kind == "case" and id(j) not in self.skip and j.case.variant.source]
        if overlap and self.on_gpu and order and isinstance(self.pool, WorkerPool):
            usable_cache(paths.cache_dir())  # refused in one line before any case runs, as the up-front compile does
            nvcc_path()
            feed = KernelFeed(self.spec.workload, self.arch, order, feed_jobs(self.slots, self.jobs))
        else:
            self.outcome.compile = self.compile(todo)
            self.emit("compiled", stats=self.outcome.compile)
        self.t_run = time.perf_counter()  # after an up-front compile; with the feed, its first cases' waits count
        self.emit("start", total=len(todo), resumed=self.outcome.resumed, stale=self.outcome.stale,
                  path=self.outcome.path)
        try:
            for _ in self.records(todo, self._from(feed) if feed is not None else None):
                pass
        finally:
            if feed is not None:
                feed.close()  # what no job asked for (no worker could start) is not compiled
        if feed is not None:
            self.outcome.compile = _feed_stats(feed, self.arch)
            self.emit("compiled", stats=self.outcome.compile)

    def _from(self, feed: KernelFeed) -> Callable[[Job], dict | None]:
        """The pool's `resolve`: a job waits for its own kernel; a case beyond the device's registers is a SKIP row."""
        def resolve(j: Job) -> dict | None:
            if j.kind != "case" or j.case not in feed:
                return None
            j.compiled = self.compiled[j.case] = feed.get(j.case)
            if why := self.beyond_registers(j, j.compiled):
                self.skip[id(j)] = why
                return {"status": "SKIP", "error": why}
            return None
        return resolve

    def search(self, all_jobs: list[Job], done: Done) -> None:
        """Each shape under the config's strategy and budget (`_search`)."""
        spec, outcome = self.spec, self.outcome
        self.t_run = time.perf_counter()
        total = sum(_search_size(spec, all_jobs, self.skip, s) for s in spec.shapes)
        self.emit("start", total=total, resumed=outcome.resumed, stale=outcome.stale, path=outcome.path)
        for shape_index, shape in enumerate(sorted(spec.shapes, key=lambda s: s.flops)):
            found = _search(spec, shape_index, [j for j in all_jobs if j.shape == shape], self.skip, done.keys,
                            done.median_ms, self.compile, self.records, self.slots)
            outcome.searches.append(found)
            outcome.compile = _add_stats(outcome.compile, found.pop("compile"))

    def segments(self, batch: list[Job]) -> tuple[list[Job], list[list[Job]]]:
        """(the jobs every other waits for, the batch in runs). One worker: runs of jobs it takes back to back in the
        plan's order, cut at each SKIP row. Several: the SKIP rows, then the vendor rows and the baseline first."""
        skip = self.skip
        if self.slots > 1:
            firsts = longest_first([j for j in batch if id(j) not in skip
                                    and (j.kind == "vendor" or j.case == self.spec.baseline)], self.env)
            return firsts, [[j for j in batch if id(j) in skip],
                            firsts + longest_first([j for j in batch if id(j) not in skip and j not in firsts],
                                                   self.env)]
        segments, cur = [], []
        for j in batch:
            if id(j) in skip:
                segments += [cur, [j]]
                cur = []
            else:
                cur.append(j)
        return [], segments + [cur]

    def records(self, batch: list[Job], resolve=None) -> Iterator[tuple[Job, dict]]:
        """Records for a batch, SKIP rows included. Under several workers a case that finishes before its shape's
        vendor rows and baseline have been written waits in memory for them (at most one case's length), so its
        row can carry % of the vendor and the speedup like any other. `resolve`: the pool's (WorkerPool.run), for
        kernels still compiling."""
        firsts, segments = self.segments(batch)
        awaited = {}  # shape -> its vendor rows and baseline not yet written
        for j in firsts:
            awaited.setdefault(j.shape, set()).add((j.kind, j.case))
        held: list[tuple[Job, dict]] = []
        for seg in segments:
            if seg and id(seg[0]) in self.skip:
                for j in seg:
                    yield j, self.skip_row(j)
                continue
            ready = [Job(j.kind, j.shape, j.case, self.compiled.get(j.case), j.next_shape) for j in seg]
            for j, rec in self.pool.run(ready, resolve) if resolve is not None else self.pool.run(ready):
                waiting = awaited.get(j.shape)
                if waiting and (j.kind, j.case) not in waiting:
                    held.append((j, rec))
                    continue
                yield from self.finish(j, rec)
                if waiting:
                    waiting.discard((j.kind, j.case))
                    if not waiting:
                        for hj, hrec in [h for h in held if h[0].shape == j.shape]:
                            yield from self.finish(hj, hrec)
                        held[:] = [h for h in held if h[0].shape != j.shape]

    def skip_row(self, j: Job) -> dict:
        self.outcome.skipped += 1
        return self.record(dict(_base_record(self.spec, j, self.env), status="SKIP", error=self.skip[id(j)]))

    def finish(self, j: Job, rec: dict | None) -> Iterator[tuple[Job, dict]]:
        outcome = self.outcome
        if rec is None:  # the vendor's library is not available here
            self.emit("record", rec=None)
            return
        if id(j) in self.skip:  # refused once its kernel was built (registers): never sent
            yield j, self.skip_row(j)
            return
        if outcome.first_record_s is None:
            outcome.first_record_s = time.perf_counter() - self.t_run
        # stamped after the worker's fields, whose environment names nnbench's commit, not a user kernel's
        rec = self.comparisons.derive(provenance.stamp(dict(_base_record(self.spec, j, self.env), **rec),
                                                       None if j.kind == "vendor" else j.case.variant, self.env))
        gpu_s = (rec.get("gpu_ms") or 0.0) / 1e3
        outcome.jobs += 1
        outcome.gpu_s += gpu_s
        slot = getattr(self.pool, "ran_on", {}).get(id(j))
        if slot is not None:
            outcome.worker_gpu_s += [0.0] * (slot + 1 - len(outcome.worker_gpu_s))
            outcome.worker_gpu_s[slot] += gpu_s
        outcome.worker_s += ((rec.get("wall_ms") or 0.0) + (rec.get("setup_ms") or 0.0)) / 1e3
        yield j, self.record(rec)

    def record(self, rec: dict) -> dict:
        rec.pop("fault", None)
        self.last_status[results.case_key_of(rec)] = rec["status"]
        self.sink.append(rec)
        self.summary.add(rec)
        self.emit("record", rec=rec)
        return rec


SEARCH_BATCH = 4  # a learning strategy's proposals per round, compiled together, then run


def _search_size(spec: SweepSpec, all_jobs: list[Job], skip: dict, shape) -> int:
    """The most jobs one shape's search can run: its vendor rows, and its candidates up to the budget."""
    jobs = [j for j in all_jobs if j.shape == shape]
    cands = sum(1 for j in jobs if j.kind == "case" and id(j) not in skip)
    vendor = sum(1 for j in jobs if j.kind == "vendor")
    return vendor + (min(cands, spec.budget.cases) if spec.budget.cases else cands)


def _search(spec: SweepSpec, shape_index: int, jobs: list[Job], skip: dict, done: set, done_ms: dict,
            compile_cases, run, slots: int) -> dict:
    """One shape under the config's strategy and budget (nnbench/sweeps/strategies.py): the vendor rows,
    the baseline, then the strategy's proposals in batches, each batch compiled in parallel and
    then run. Cases already in the file are told to the strategy first and count."""
    stats = CompileStats()
    vendor = [j for j in jobs if j.kind == "vendor" and job_key(spec, j) not in done]
    cands = [j for j in jobs if j.kind == "case" and id(j) not in skip]
    search = strategies.make(spec.strategy, [j.case for j in cands], spec.seed * 1000 + shape_index,
                             coords=lambda c: (c.variant.name, c.param_dict), budget_cases=spec.budget.cases)
    for i, j in enumerate(cands):
        key = job_key(spec, j)
        if key in done:
            search.tell(i, done_ms.get(key))
    budget = spec.budget
    t0 = time.perf_counter()
    resumed = search.evaluated

    def out_of_budget() -> bool:
        return bool((budget.cases and search.evaluated + len(search.pending) >= budget.cases)
                    or (budget.seconds and time.perf_counter() - t0 >= budget.seconds))

    def evaluate(batch: list[int]) -> None:
        nonlocal stats
        stats = _add_stats(stats, compile_cases([cands[i] for i in batch]))
        by_case = {cands[i].case: i for i in batch}
        for i in batch:
            if id(cands[i]) in skip:  # refused after compiling: told, never counted
                search.forget(i)
        for j, rec in run([cands[i] for i in batch]):
            i = by_case[j.case]
            if i in search.pending:
                search.tell(i, rec.get("median_ms") if rec.get("status") == "PASS" else None)

    for _ in run(vendor):
        pass
    base = next((i for i, j in enumerate(cands) if j.case == spec.baseline), None)
    lead = []  # the baseline, first in the first batch, so every later row carries its speedup
    if base is not None and base not in search.results and not out_of_budget():
        search.pending.add(base)
        lead = [base]
    while not out_of_budget() or lead:
        # A strategy that does not learn proposes everything at once (one compile, no pauses between
        # batches); one that learns proposes a batch per round, at least one case per worker.
        n = max(SEARCH_BATCH, slots) if search.adaptive or budget.seconds else len(cands)
        if budget.cases:
            n = min(n, budget.cases - search.evaluated - len(search.pending))
        batch = lead + (search.ask(n) if n > 0 else [])
        lead = []
        if not batch:
            break
        evaluate(batch)
    best = search.best()
    return {"shape": jobs[0].shape.label if jobs else "", "candidates": len(cands), "evaluated": search.evaluated,
            "resumed": resumed, "best_ms": best[1] if best else None,
            "best": f"{cands[best[0]].case.variant.name} {cands[best[0]].case.param_label}" if best else None,
            "compile": stats}


def _add_stats(a: CompileStats, b: CompileStats) -> CompileStats:
    return CompileStats(kernels=a.kernels + b.kernels, cached=a.cached + b.cached, compiled=a.compiled + b.compiled,
                        failed=a.failed + b.failed, skipped=a.skipped + b.skipped, jobs=max(a.jobs, b.jobs),
                        wall_s=a.wall_s + b.wall_s, nvcc_cpu_s=a.nvcc_cpu_s + b.nvcc_cpu_s, arch=a.arch or b.arch)


HELLO_WATCHDOG_S = 600.0  # loading hundreds of modules is slow only on a cold driver
