"""`nnbench sweep`: a YAML config's cases, compiled in parallel, run in a worker, resumable."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click
from rich.markup import escape

from nnbench import options, results, sanitize
from nnbench.cli import app
from nnbench.cli.app import backend_option
from nnbench.errors import NnbenchError
from nnbench.report import tables
from nnbench.runtime.backend import HOST_CLOCK


# -- sweep ----------------------------------------------------------------------------------------
class _SweepView:
    """Renders a sweep's events: a progress bar with ETA on stderr, one line per worker restart."""

    def __init__(self) -> None:
        self.progress = None
        self.task = None
        self.failed = 0

    def __call__(self, kind: str, **data) -> None:
        if kind == "compiled":
            app.err.print(_compile_line(data["stats"]))
        elif kind == "start":
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            if data["resumed"]:
                app.err.print(f"resuming {data['path']}: {data['resumed']} cases already done")
            if data.get("stale"):
                app.err.print(f"{data['stale']} cases run again: their kernel source, headers, flags, nnbench or "
                              "driver changed since their rows")
            self.progress = Progress(TextColumn("[bold]sweep"), BarColumn(), MofNCompleteColumn(),
                                     TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                                     TextColumn("{task.description}"), console=app.err, transient=False)
            self.progress.start()
            self.task = self.progress.add_task("", total=data["total"])
        elif kind == "job" and self.progress:
            self.progress.update(self.task, description=data["label"])
        elif kind == "record" and self.progress:
            rec = data["rec"]
            if rec is not None and rec["status"] in results.FAILED:
                self.failed += 1
                why = rec.get("error") or f"rel_err {rec.get('rel_err')}"
                self.progress.console.print(f"[red]{rec['status']}[/] {rec['variant']} {rec['params']} "
                                            f"{rec['shape']}: {why}")
            self.progress.advance(self.task)
        elif kind == "worker" and data["restart"] and self.progress:
            self.progress.console.print(f"[yellow]started a fresh worker (pid {data['pid']})[/]")
        elif kind == "lost":
            job = data["job"]
            what = job.case if job.kind == "vendor" else f"{job.case.variant.name} {job.case.param_label}"
            console = self.progress.console if self.progress else app.err
            console.print(f"[yellow]an MPI rank did not answer; re-queued {what} at {job.shape.label}[/]")

    def stop(self) -> None:
        if self.progress:
            self.progress.stop()


def _compile_line(st) -> str:
    if not st.kernels:
        return "compile: nothing to compile"
    line = (f"compile: {st.kernels} kernels for {st.arch} · {st.compiled} compiled, {st.cached} cached, "
            f"{st.failed} failed{f', {st.skipped} beyond the device limits' if st.skipped else ''} · "
            f"{st.wall_s:.1f} s wall on {st.jobs} jobs{' while the first cases ran' if st.overlapped else ''}")
    if st.compiled:
        line += (f" · nvcc CPU {st.nvcc_cpu_s:.1f} s ({st.cpu_per_core_s:.1f} s per job) · "
                 f"wall/ideal {st.wall_vs_ideal:.2f}")
    if st.load_s is not None:
        line += f" · loaded into the GPU context in {st.load_s:.2f} s"
    return line


def runs_nothing_on(specs, backend: str) -> bool:
    """Whether no case of the config runs on this backend: a GPU config on the CPU, every case a SKIP row."""
    return not any(spec.workload.runs_on(case.variant, backend) for spec in specs for case in spec.cases)


def run_sweep(specs, backend: str, out_path, fresh: bool, jobs, load_only: bool = False, show: bool = True,
              retry_errors: bool = False, json_path=None, gpus: list[int] | None = None, replay=None,
              mpi: bool = False):
    """Run each part of a config in turn into one result file; return the outcomes, in order."""
    from nnbench import api
    views: list[_SweepView] = []

    def events(spec):
        if len(specs) > 1:
            app.out.print(f"part {spec.part} of {len(specs)}: workload {spec.workload_name}, {len(spec.shapes)} shapes")
        views.append(_SweepView())
        return views[-1]

    def finished(spec, outcome):
        views[-1].stop()
        if show and not load_only:
            print_outcome(spec, outcome)

    try:
        return api.run_sweep(specs, backend=backend, device=app.DEVICE[0], out=out_path, fresh=fresh, jobs=jobs,
                         load_only=load_only, retry_errors=retry_errors, events=events, finished=finished,
                         json=json_path, gpus=gpus, replay=replay, mpi=mpi).outcomes
    finally:
        for view in views:
            view.stop()


@app.cli.command()
@click.argument("config_path", metavar="CONFIG.yaml", type=click.Path(dir_okay=False))
@click.option("--out", "out_path", type=click.Path(dir_okay=False),
              help="Result CSV (default: resume the newest results/<sweep>-<gpu>-*.csv, or start a new one).")
@click.option("--fresh", is_flag=True, help="Start a new result file instead of resuming.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), help="Parallel nvcc processes (default: one per core).")
@click.option("--watchdog", type=options.POSITIVE,
              help="Seconds without progress before a case counts as hung (overrides timing.watchdog).")
@click.option("--dry-run", is_flag=True, help="Print the expanded plan and stop; needs no GPU.")
@click.option("--compile-only", is_flag=True,
              help="Compile (and, with a GPU, load) every kernel of the sweep, report the times, and stop.")
@click.option("--arch", help="With --compile-only and no GPU: the target, e.g. sm_90.")
@click.option("--retry-errors", is_flag=True,
              help="On a resume, run again the cases whose last row is ERROR (a crash, a hang, a failed compile).")
@app.json_option
@app.keep_throttled_option
@app.sanitize_option
@click.option("--gpus", "gpus_opt", metavar="all|N",
              help="One worker per GPU of this host (the first N, or all), each pinned to its GPU, into one result "
                   "file; kernels compile once. With --backend cpu: N CPU workers.")
@click.option("--mpi", is_flag=True,
              help="Run the cases on MPI ranks (every rank but 0, one worker each, pinned to a GPU of its node): "
                   "start as `mpiexec -n N python -m mpi4py.futures -m nnbench sweep CONFIG --mpi`, or with srun.")
@click.option("--replay", "replay_path", type=click.Path(dir_okay=False),
              help="Answer every case from this finished result CSV instead of a GPU (simulation mode): runs the "
                   "config's strategy with no GPU.")
@click.option("--workload", "only", multiple=True, metavar="NAME",
              help="Only the config's parts of this workload (repeatable), e.g. the conv part of "
                   "configs/sanitize.yaml on its own.")
@backend_option
def sweep(config_path, out_path, fresh, jobs, watchdog, dry_run, compile_only, arch, retry_errors, gpus_opt,
          mpi, replay_path, only, backend) -> None:
    """Sweep a YAML config: every point of its axes, at every shape; resumable.

    \b
    Examples:
      nnbench sweep configs/gemm_sweep.yaml
      nnbench sweep configs/gemm_sweep.yaml --dry-run
      nnbench sweep configs/step9.yaml --compile-only --arch sm_90
      nnbench sweep configs/gemm_sweep.yaml --replay docs/data/figures/gemm_sweep_h100.csv --backend cpu
      nnbench sweep configs/gemm_sweep.yaml --gpus all
      nnbench sweep configs/sanitize.yaml --workload conv --dry-run
    """
    from dataclasses import replace

    from nnbench.sweeps import config
    if dry_run and compile_only:
        raise NnbenchError("--dry-run and --compile-only are exclusive: give one of them")
    if retry_errors and fresh:
        raise NnbenchError("--retry-errors and --fresh are exclusive: --fresh starts a new file, with no ERROR rows "
                           "to run again")
    if out_path and fresh and Path(out_path).exists():
        raise NnbenchError(f"--out {out_path}: the file exists and --fresh would overwrite it; name a new file")
    if sanitize.MODE["tool"]:
        # each case once, in a process of its own on the one GPU: none of these has a meaning there
        for flag, given in (("--replay", replay_path), ("--mpi", mpi), ("--gpus", gpus_opt is not None),
                            ("--compile-only", compile_only)):
            if given:
                raise NnbenchError(f"--sanitize and {flag} are exclusive: a sanitized run runs each case once under "
                                   "compute-sanitizer, in a process of its own on one GPU")
    if out_path is not None:
        from nnbench.sweeps.sweep import refuse_old_schema
        refuse_old_schema(Path(out_path))
        if sanitize.MODE["tool"] and Path(out_path).is_file():
            from nnbench.sweeps.sanitized import refuse_another_tool
            refuse_another_tool(Path(out_path), sanitize.MODE["tool"])  # again, locked, when it is resumed
    specs = parts_of(config.load_config(config_path), only, config_path)
    if watchdog:
        specs = [replace(spec, watchdog_s=watchdog) for spec in specs]
    if app.KEEP_THROTTLED[0]:
        specs = [replace(spec, settings=replace(spec.settings, keep_throttled=True)) for spec in specs]
    from nnbench.cli.nogpu import check_arch
    check_arch(arch, compile_only)
    # every refusal before the plan is printed: bad input gets its one line and nothing else
    if replay_path and compile_only:
        raise NnbenchError("--replay and --compile-only are exclusive: a replay compiles nothing")
    if replay_path and not Path(replay_path).is_file():
        raise NnbenchError(f"--replay {replay_path}: no such file")
    if mpi and gpus_opt is not None:
        raise NnbenchError("--mpi and --gpus are exclusive: under MPI every rank takes one GPU of its node")
    if gpus_opt is not None:
        _gpus_text(gpus_opt)  # a dry run opens no GPU to count, but `--gpus 0` is wrong whatever runs
    if not (dry_run or replay_path or (compile_only and arch)):
        backend = app.worker_backend(backend)
    if compile_only and backend == "cpu" and not arch:
        # the CPU path compiles nothing: without a GPU, compile for an arch instead of saying so
        from nnbench.backend_choice import NO_GPU_ARCH
        arch = NO_GPU_ARCH
        app.err.print(f"nnbench: no GPU: compiling for {arch} (--arch picks another)")
    gpus = _gpus(gpus_opt, backend) if gpus_opt is not None and not (dry_run or compile_only) else None
    for spec in specs:
        n_shapes = len(spec.shapes)
        app.out.print(f"sweep {spec.name} ({spec.path}){f' part {spec.part}' if spec.part else ''} · workload "
                      f"{spec.workload_name} · {n_shapes} shapes · baseline {_case_label(spec.baseline)}")
        app.out.print(tables.plan_table(spec.counts, _runs(spec), "plan: the axes' product, less what restrictions and "
                                                               "the variants' rules exclude"))
        if (line := _memory_line(spec)) is not None:
            app.out.print(line)
    if dry_run:
        return
    if compile_only:
        if arch:
            from nnbench.sweeps import sweep as sweep_mod
            for spec in specs:
                app.out.print(_compile_line(sweep_mod.compile_only(spec, arch, jobs)))
        else:
            for outcome in run_sweep(specs, backend, None, True, jobs, load_only=True):
                app.out.print(_compile_line(outcome.compile))
        return
    if sanitize.MODE["tool"] or sanitize.MODE["child"] is not None:
        _sanitized(specs, backend, out_path, retry_errors)
        return
    if not replay_path and runs_nothing_on(specs, backend):
        app.err.print(f"nnbench: {escape(str(config_path))}: none of its variants runs on the {backend} backend, so "
                      f"every case is a SKIP row; `--dry-run` shows the plan and `--compile-only` compiles its "
                      f"kernels without a GPU", soft_wrap=True)
    outcomes = run_sweep(specs, backend, out_path, fresh, jobs, retry_errors=retry_errors, json_path=app.JSON[0],
                         gpus=gpus, replay=replay_path, mpi=mpi)
    code = 1 if any(o.failed for o in outcomes) else 0
    if mpi and any(o.requeued for o in outcomes):
        from nnbench.sweeps.pool import end_mpi_job
        end_mpi_job(code)  # MPI_Finalize would wait for the lost rank forever
    if code:
        sys.exit(code)


def parts_of(specs, only: tuple[str, ...], config_path) -> list:
    """The config's parts of the workloads `--workload` names (every part without one), in the config's order; a
    sanitizer's child process gets the same option, so it counts the cases as its parent does."""
    if not only:
        return specs
    from nnbench.workloads import WORKLOADS
    for name in only:
        if name not in WORKLOADS:
            raise NnbenchError(f"--workload {name}: unknown; choose from {', '.join(WORKLOADS)}")
    kept = [spec for spec in specs if spec.workload_name in only]
    if not kept:
        have = ", ".join(dict.fromkeys(spec.workload_name for spec in specs))
        raise NnbenchError(f"--workload {', '.join(only)}: {config_path} has no such part (its parts' workloads: "
                           f"{have})")
    return kept


def _sanitized(specs, backend: str, out_path, retry_errors: bool = False) -> None:
    """--sanitize: each case once under compute-sanitizer, into a file of its own (nnbench/sweeps/sanitized.py);
    an existing --out file of the same tool is resumed: its cases are skipped, the rest added to it."""
    from nnbench.sweeps import sanitized
    tool, child = sanitize.MODE["tool"], sanitize.MODE["child"]
    if child is not None:
        be = app.open_device(backend)
        env = results.environment(be)
        app.stream(app.open_sink(None, "sweep", env["gpu"]), sanitized.child(specs, child, be, env))
        return
    total = len(sanitized.plan(specs, "cuda"))
    done: frozenset[str] = frozenset()
    if out_path and Path(out_path).exists():
        from nnbench import safeio
        # locked before the done cases are read: a second run on the same file is refused, not run twice
        sink = results.CsvSink(Path(out_path), fields=results.FIELDS, mode=safeio.APPEND)
        try:
            done = sanitized.done_cases(Path(out_path), specs, tool, retry_errors)
        except BaseException:
            sink.close()
            raise
        app.out.print(f"{out_path}: resuming, {total - len(done)} of {total} cases to run under {tool}")
    else:
        sink = app.open_sink(out_path, f"sanitize-{specs[0].name}", tool)
    path = sink.path
    rows = app.stream(sink, sanitized.parent(specs, tool, sanitize.MODE["argv"], sanitize.MODE["jobs"] or 1, done),
                      total - len(done))
    for r in rows:
        if r.get("status") in results.FAILED:
            where = f"{r['variant']} {r.get('params') or ''} {r['shape']}"
            app.out.print(f"[red]{r['status']}[/] {where}: {r.get('error')}")
    app.out.print(f"{sum(r.get('status') == 'PASS' for r in rows)} of {len(rows)} cases clean under {tool}")
    app.print_csv(path)
    if any(r.get("status") in results.FAILED for r in rows):
        sys.exit(1)


def _memory_line(spec) -> str | None:
    """The plan's largest problem and its memory, which the sweep checks against the GPU's free memory when its
    worker starts (host memory was checked when the config was read)."""
    from nnbench import memory
    need = memory.largest(spec.workload, spec.shapes)
    if need is None:
        return None
    problem, host, device = need
    return (f"memory: largest shape {problem.label}: about {memory.readable(device)} of GPU memory, "
            f"{memory.readable(host)} of host memory (checked before any case runs)")


def _runs(spec) -> dict[str, int]:
    """Per variant, the (case, shape) pairs a run of the spec runs: the sweep's own plan, counted."""
    from collections import Counter

    from nnbench.sweeps.sweep import plan_jobs
    return Counter(j.case.variant.name for j in plan_jobs(spec, False, "cuda"))


def _gpus_text(text: str) -> None:
    if text != "all" and not (text.isascii() and text.isdigit() and int(text) >= 1):  # not '²', which isdigit
        raise NnbenchError(f"--gpus {text}: expected all or a number of GPUs >= 1")


def _gpus(text: str, backend: str) -> list[int]:
    """`--gpus all` or `--gpus N`: the devices to pin one worker each to (N CPU workers on --backend cpu)."""
    _gpus_text(text)
    if backend == "cpu":
        if text == "all":
            raise NnbenchError("--gpus all: with --backend cpu give a number of workers, e.g. --gpus 4")
        cores = os.cpu_count() or 1
        if int(text) > cores:
            raise NnbenchError(f"--gpus {text}: with --backend cpu, at most {cores} workers (this machine's cores)")
        return list(range(int(text)))
    first = app.DEVICE[0]
    if text != "all" and int(text) == 1:
        # The plain sweep's own GPU: its worker opens it and says if it is missing, as a plain sweep's
        # does: no count at all.
        return [first]
    from nnbench.sweeps.worker import count_gpus
    count = count_gpus()  # in a child: this process, like a plain sweep's parent, never initialises CUDA
    if count == 0:
        raise NnbenchError(f"--gpus {text}: this machine has no CUDA GPU; use --backend cpu --gpus N for CPU workers")
    n = count if text == "all" else int(text)
    if n > count:
        raise NnbenchError(f"--gpus {text}: this machine has {count} GPU{'s' if count > 1 else ''}")
    if first + n > count:
        raise NnbenchError(f"--gpus {text} from --device {first}: this machine has GPUs 0..{count - 1}")
    return list(range(first, first + n))


def _case_label(case) -> str:
    return f"{case.variant.name} {case.param_label}".strip() if case else "none"


def print_outcome(spec, outcome) -> None:
    clock = "CUDA events" if outcome.backend == "cuda" else HOST_CLOCK  # the record names its backend
    title = (f"sweep {spec.name} · best parameters per shape · median of ≥{spec.settings.min_samples} samples "
             f"({clock}), {'cold' if spec.settings.cold else 'hot'} cache")
    app.out.print(tables.sweep_table(outcome.summary.rows(), spec.baseline.variant.name if spec.baseline else None,
                                 title))
    line = f"ran {outcome.jobs} cases in {outcome.run_s:.1f} s ({outcome.wall_s:.1f} s with start-up and compilation)"
    if outcome.resumed:
        line += f" ({outcome.resumed} resumed from the file)"
    if outcome.skipped:
        line += f" · {outcome.skipped} skipped for this device"
    if outcome.failed:
        line += f" · {outcome.failed} failed"
    if outcome.restarts:
        line += f" · {outcome.restarts} worker restarts"
    if outcome.requeued:
        line += f" · {outcome.requeued} case{'s' if outcome.requeued > 1 else ''} re-queued from lost MPI ranks"
    for found in outcome.searches:
        line_s = (f"{spec.strategy} ({spec.budget}) at {found['shape']}: evaluated {found['evaluated']} of "
                  f"{found['candidates']} candidates")
        if found["resumed"]:
            line_s += f" ({found['resumed']} from the file)"
        if found["best"]:
            line_s += f"; best {found['best']} {found['best_ms']:.4g} ms"
        app.out.print(line_s)
    if outcome.replayed:
        line += f" · replayed from {outcome.replayed}: no kernel ran, every row is the file's"
    elif outcome.overhead is not None:
        over = f" summed over {outcome.workers} workers" if outcome.workers > 1 else ""
        line += (f" · kernel time {outcome.gpu_s:.1f} s{over} · overhead outside kernels "
                 f"{100 * outcome.overhead:.1f}% of the run ({100 * outcome.overhead_total:.1f}% of the whole)")
        if len(outcome.worker_overheads) > 1:
            line += " · per worker, the run's wall time outside its kernels: " + ", ".join(
                f"{100 * o:.1f}% ({s:.1f} s)" for o, s in zip(outcome.worker_overheads, outcome.worker_outside_s))
    app.out.print(line)
    if spec.workload_name == "kernel" and outcome.backend == "cpu":
        app.out.print("CPU backend: no kernel ran; each problem's float64 reference was timed and verified against "
                      "itself (its output dtype's rounding), which checks the config, not the kernel")
    app.print_csv(outcome.path)

