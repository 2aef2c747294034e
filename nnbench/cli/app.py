"""The group, its one-line error handling, the consoles and the options every command shares.

Every user error (a NnbenchError, or a click usage error) becomes one line on stderr and exit
code 2; a failed verification or a kernel fault exits 1 after the results are written.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import threading

import click
from rich.console import Console
from rich.markup import escape

from nnbench import options, rawresults, workloads
from nnbench.errors import NnbenchError
from nnbench.version import __version__

# Wide when piped (CI logs, pasted output), so the ladder table is never squeezed into 80 columns.
out = Console(highlight=False, width=None if sys.stdout.isatty() else 180)
err = Console(stderr=True, highlight=False)


ARGV: list[str] = []  # this invocation's arguments, for starting the same command as MPI ranks


def _who() -> str:
    """'rank R: ' inside one rank of several (so a dying rank names itself), else ''."""
    from nnbench.runtime.exchange import started_size
    if started_size() <= 1:
        return ""
    import os
    rank = next((os.environ[v] for v in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")
                 if v in os.environ), "?")
    return f"rank {rank}: "


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the process is, so every `finally` runs as on Ctrl-C."""


def _terminate(signum, frame):
    raise Terminated()


class NnbenchCommand(click.Command):
    """A command whose file options refuse an empty path: `--out "$UNSET"` would otherwise read as no --out at all
    (a default file written, or nothing written and exit 0) instead of the mistake it is."""

    def parse_args(self, ctx, args):
        rest = super().parse_args(ctx, args)
        for param in self.get_params(ctx):
            if isinstance(param.type, click.Path) and param.name and ctx.params.get(param.name) == "":
                what = param.opts[0] if isinstance(param, click.Option) else param.human_readable_name
                raise click.UsageError(f"{what} '': an empty path; name a file", ctx)
        return rest


class NnbenchGroup(click.Group):
    """Runs click without its multi-line usage dumps: any error is one line and exit code 2."""

    command_class = NnbenchCommand

    def invoke(self, ctx):
        # SIGTERM (a CI timeout, `kill`, mpirun ending its ranks) unwinds like Ctrl-C, so the result files
        # are closed as they are then: rows kept, a file with none removed.
        main_thread = threading.current_thread() is threading.main_thread()
        before = signal.signal(signal.SIGTERM, _terminate) if main_thread else None
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as e:  # before click's handler, which adds a blank line
            how = "terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted (Ctrl-C)"
            click.echo(f"nnbench: {how}; every row already written is kept", err=True)
            raise click.exceptions.Exit(143 if isinstance(e, Terminated) else 130) from None
        finally:
            if main_thread:
                signal.signal(signal.SIGTERM, before)

    def main(self, args=None, prog_name=None, **kw):
        kw["standalone_mode"] = False
        DEVICE[0] = 0
        JSON[0], KEEP_THROTTLED[0], BACKEND[0] = None, False, None
        from nnbench import measure, sanitize
        measure.KEEP_THROTTLED[0] = measure.ENERGY[0] = False
        sanitize.MODE.update(tool=None, argv=None, child=None, jobs=None)
        ARGV[:] = list(sys.argv[1:] if args is None else args)
        try:
            rc = super().main(args=args, prog_name=prog_name or "nnbench", **kw)
        except click.exceptions.Exit as e:
            sys.exit(e.exit_code)
        except click.exceptions.Abort:
            click.echo("nnbench: aborted", err=True)
            sys.exit(130)
        except click.ClickException as e:
            click.echo(f"nnbench: error: {_who()}{e.format_message()}", err=True)
            sys.exit(2)
        except NnbenchError as e:
            click.echo(f"nnbench: error: {_who()}{e}", err=True)
            sys.exit(2)
        except OSError as e:  # the last net under safeio: an OS error is still one line naming the path
            where = f"{e.filename}: " if e.filename else ""
            click.echo(f"nnbench: error: {_who()}{where}{e.strerror or e}", err=True)
            sys.exit(2)
        except MemoryError:
            click.echo(f"nnbench: error: {_who()}out of host memory; give a smaller problem", err=True)
            sys.exit(2)
        finally:  # the command's process-wide modes end with it (the API and tests run commands in one process)
            sanitize.MODE.update(tool=None, argv=None, child=None, jobs=None)
        sys.exit(rc if isinstance(rc, int) else 0)


@click.group(cls=NnbenchGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nnbench")
def cli() -> None:
    """Benchmark and profile the CUDA kernels behind neural-network training.

    Every kernel is checked against a float64 NumPy reference, then timed with CUDA events.
    """


def main() -> None:
    cli()


# -- shared option groups -------------------------------------------------------------------------
def timing_options(f):
    f = click.option("--budget", type=options.POSITIVE, default=0.5, show_default=True,
                     help="Time budget per case in seconds; sampling stops earlier once noise <= 1%.")(f)
    f = click.option("--cold", is_flag=True, help="Flush L2 before every sample (one launch per sample).")(f)
    return energy_option(keep_throttled_option(f))


def energy_option(f):
    return click.option("--energy", is_flag=True, expose_value=False,
                        callback=lambda ctx, param, value: _set_energy(value),
                        help="Measure each case's energy on NVML's energy counter: after its timed samples and a "
                             "cool-down, the case runs again for a window of at least 1 s (adds 1.2-4.5 s a case; "
                             "docs/ENERGY.md). Off, energy_j stays empty.")(f)


def _set_energy(value) -> None:
    from nnbench import measure
    measure.ENERGY[0] = bool(value)


def sanitize_option(f):
    """--sanitize TOOL: each case once under compute-sanitizer, in a process of its own (nnbench/sanitize.py);
    --sanitize-jobs N: that many of those processes at once; --sanitize-child K (hidden): that process, running
    the K-th case."""
    from nnbench import sanitize
    f = click.option("--sanitize-child", type=click.IntRange(min=0), hidden=True, expose_value=False,
                     callback=lambda ctx, param, value: sanitize.MODE.update(child=value))(f)
    f = click.option("--sanitize-jobs", type=click.IntRange(min=1), metavar="N", expose_value=False,
                     callback=_sanitize_jobs,
                     help="With --sanitize: run up to N cases' processes at once, on the same GPU (they are not "
                          f"timed). Default: the CPU cores, at most {sanitize.MAX_DEFAULT_JOBS}.")(f)
    return click.option("--sanitize", type=click.Choice(sanitize.TOOLS), expose_value=False, callback=_sanitize,
                        help="Run each case once under NVIDIA's compute-sanitizer with this tool, in a process of "
                             "its own, untimed: a hazard is FAIL with the sanitizer's first report line. Needs a "
                             "GPU and compute-sanitizer on PATH.")(f)


# The options a sanitizing parent keeps to itself: its children get --sanitize-child K instead.
_PARENT_ONLY = ("--sanitize", "--sanitize-jobs")


def _sanitize(ctx, param, value) -> None:
    from nnbench import sanitize
    ctx.meta["nnbench.sanitize"] = value
    _jobs_need_a_tool(ctx)
    if value is None:
        return
    sanitize.executable()  # on PATH, or one line now
    argv, skip = [], False
    for arg in ARGV:  # the same command without the parent's own options, for the child processes
        if skip:
            skip = False
        elif arg in _PARENT_ONLY:
            skip = True
        elif not arg.startswith(tuple(f"{o}=" for o in _PARENT_ONLY)):
            argv.append(arg)
    sanitize.MODE.update(tool=value, argv=argv, jobs=sanitize.MODE["jobs"] or sanitize.default_jobs())


def _sanitize_jobs(ctx, param, value) -> None:
    from nnbench import sanitize
    ctx.meta["nnbench.sanitize_jobs"] = value
    _jobs_need_a_tool(ctx)
    if value is not None:
        sanitize.MODE["jobs"] = value


def _jobs_need_a_tool(ctx) -> None:
    # click calls the two callbacks in the command line's order: whichever comes second checks the pair
    meta = ctx.meta
    if "nnbench.sanitize" in meta and meta.get("nnbench.sanitize_jobs") is not None and not meta["nnbench.sanitize"]:
        raise click.BadParameter("only with --sanitize TOOL (it sets how many sanitized cases run at once)",
                                 param_hint="'--sanitize-jobs'")


def refuse_unsanitizable(backend_name: str) -> None:
    """--sanitize runs kernels under the sanitizer: on the CPU backend there are none (one line, exit 2)."""
    from nnbench import sanitize
    if (sanitize.MODE["tool"] or sanitize.MODE["child"] is not None) and backend_name != "cuda":
        raise NnbenchError(f"--sanitize: needs a GPU (this run is on the {backend_name} backend)")


KEEP_THROTTLED = [False]  # this invocation's --keep-throttled


def keep_throttled_option(f):
    return click.option("--keep-throttled", is_flag=True, expose_value=False,
                        callback=_keep_throttled,
                        help="Keep samples taken while the GPU was throttled (SM clock under 75% of its maximum, "
                             "or a power or thermal limit set); by default they are dropped and counted.")(f)


def _keep_throttled(ctx, param, value) -> None:
    from nnbench import measure
    KEEP_THROTTLED[0] = measure.KEEP_THROTTLED[0] = bool(value)


def settings(budget: float, cold: bool):
    """The timing settings of a command's options."""
    from nnbench import measure
    return measure.TimingSettings(budget_s=budget, cold=cold, keep_throttled=KEEP_THROTTLED[0])


JSON = [None]  # this invocation's --json FILE


def json_option(f):
    return click.option("--json", "json_path", type=click.Path(dir_okay=False), expose_value=False,
                        callback=lambda ctx, param, value: JSON.__setitem__(0, value),
                        help="Also write what the command reports to this JSON Lines file (a new file; docs/JSON.md): "
                             "measured records with their raw samples, a profile, the devices, or the gate's "
                             "verdicts.")(f)


def refuse_taken(path, flag: str | None = None) -> None:
    """A --json FILE that cannot be a new file, refused before the work (safeio says the same at write time).
    `flag`: the command's option that lets it replace the file (report's --force), named in the remedy."""
    from pathlib import Path
    p = Path(path)
    if p.is_dir():
        raise NnbenchError(f"--json {path}: is a folder; name a file")
    if p.exists() or p.is_symlink():
        raise NnbenchError(f"--json {path}: the file exists and nnbench never overwrites a result file; name a new "
                           f"file{f', or pass {flag} to replace it' if flag else ''}")


def open_sink(csv_path, name: str, gpu: str, force: bool = False):
    """The command's result sink: its CSV, and the --json file where one is named."""
    from nnbench import results, sanitize
    if sanitize.MODE["child"] is not None:  # a sanitized case's process: its record goes to its parent alone
        aside = os.path.dirname(os.environ.get(sanitize.RECORD_ENV) or "") or None
        return rawresults.open_sink(os.path.join(aside or tempfile.mkdtemp(prefix="nnbench-sanitize-"),
                                                 f"{name}.csv"), name, gpu, results.FIELDS, True)
    return rawresults.open_sink(csv_path, name, gpu, results.FIELDS, force, json_path=JSON[0])


def force_option(f):
    return click.option("--force", is_flag=True, help="Let --csv replace an existing file (never the default).")(f)


DEVICE = [0]  # this invocation's --device: the GPU every backend it opens runs on


def _remember_device(ctx, param, value):
    if value is not None:
        DEVICE[0] = value
    return value


BACKEND = [None]  # this invocation's backend request (backend_choice.Request): the name and who asked


def _request_backend(ctx, param, value):
    """--backend, else NNBENCH_BACKEND, else the user's config file, else auto: the commands see the
    name; open_device says which backend that became and why."""
    from nnbench import backend_choice
    BACKEND[0] = backend_choice.requested(value)
    return BACKEND[0].name


def backend_option(f):
    f = click.option("--device", type=click.IntRange(min=0), default=None, expose_value=False,
                     callback=_remember_device, help="The GPU to run on, by index (`nnbench devices` lists them; "
                                                     "default 0).")(f)
    return click.option("--backend", type=click.Choice(["cuda", "cpu", "auto"]), default=None,
                        callback=_request_backend,
                        help="cuda: PyCUDA on the --device GPU. cpu: the NumPy path. auto: cuda if a GPU works, "
                             "else cpu. Default: $NNBENCH_BACKEND, else `backend:` in "
                             "~/.config/nnbench/config.yaml, else auto.")(f)



def param_options(*names: str):
    """One --name option per kernel parameter in the registry (TS -> --ts, WPT -> --wpt, ...), for
    every parameter name of the given workloads (the first declaration's help)."""
    first: dict[str, object] = {}
    for name in names:
        for p in workloads.all_param_names(name):
            first.setdefault(p.name, p)
    return _param_deco(list(first.values()))


def every_param_option(f):
    """param_options for every parameter of every listed workload's variants (workloads.WORKLOADS), for a
    command that takes any workload's variant: a new workload's parameters need no edit here."""
    return _param_deco(workloads.every_param())(f)


def _param_deco(params):
    def deco(f):
        # the command's own options below this decorator; a parameter must not take one of their names
        taken = {o for q in getattr(f, "__click_params__", ()) for o in q.opts}
        for p in reversed(params):
            if p.option in taken:
                raise ValueError(f"kernel parameter {p.name}: its option {p.option} is already {f.__name__}'s own "
                                 "option; rename the parameter")
            f = click.option(p.option, p.name, type=int, default=None, help=f"{p.name}: {p.help}.")(f)
        return f
    return deco


def autotune_option(f):
    return click.option("--no-autotune", is_flag=True,
                        help="Launch each variant's fixed tiles instead of timing its candidate tiles per shape and "
                             "taking the fastest (cached on disk per device, driver, kernel source and shape; "
                             "docs/autotune.md). A tile parameter given on the command line fixes its variant's "
                             "tiles as well.")(f)


def tuner(backend, no_autotune: bool, fixed=()):
    """The autotuner of a command's run (nnbench/runtime/autotune.py), or None: --no-autotune, or no GPU."""
    if no_autotune:
        return None
    from nnbench.runtime.autotune import Tuner
    return Tuner.for_backend(backend, fixed)


def request_of(backend: str):
    from nnbench import backend_choice
    return BACKEND[0] if BACKEND[0] is not None and BACKEND[0].name == backend else \
        backend_choice.Request(backend, "--backend")


def _say_backend(line: str | None) -> None:
    if line:
        # escaped, or rich takes a hint's `[gpu]` for markup
        err.print(f"[yellow]{escape(line)}[/]", soft_wrap=True)


def _refuse_device_on_cpu(name: str) -> None:
    """--device N (N > 0) with the CPU backend chosen: there is no GPU it could mean, and taking it quietly would
    let a script believe it ran on GPU N."""
    if name == "cpu" and DEVICE[0]:
        raise NnbenchError(f"--device {DEVICE[0]}: the cpu backend runs on no GPU; leave --device out, or use "
                           "--backend cuda")


def open_device(backend: str, device: int | None = None):
    """The backend of `backend` (as the option resolved it), with its one line on stderr where it was
    not simply typed: auto's choice and reason, or the variable or file that set it."""
    from nnbench import backend_choice
    if device is None:
        _refuse_device_on_cpu(request_of(backend).name)
    be, line = backend_choice.open_requested(request_of(backend), DEVICE[0] if device is None else device)
    _say_backend(line)
    refuse_unsanitizable(be.name)
    return be


def worker_backend(backend: str) -> str:
    """cuda or cpu for a sweep's workers, with the same one line as open_device; this process never
    initialises CUDA (its workers own the GPUs)."""
    from nnbench import backend_choice
    _refuse_device_on_cpu(request_of(backend).name)
    name, line = backend_choice.resolve_without_context(request_of(backend))
    _say_backend(line)
    refuse_unsanitizable(name)
    return name


def print_csv(path) -> None:
    out.print(f"CSV: {escape(str(path))}")


def device_line(env: dict) -> str:
    if env.get("backend") != "cuda":
        from nnbench.runtime.cpu import cpu_model  # result rows keep no device_name: read it here
        return f"CPU backend: NumPy float32 on {env.get('device_name') or cpu_model()}, {env.get('sms')} cores"
    return (f"{env['gpu']} · sm_{env['cc'].replace('.', '')} · {env['sms']} SMs · FP32 peak "
            f"{env['fp32_peak_tflops']:.1f} TFLOP/s at {env['max_sm_clock_mhz']:.0f} MHz · driver {env['driver']} "
            f"· CUDA {env['cuda']} · nvcc {env.get('nvcc')}")



def stream(sink, records, total: int | None = None) -> list[dict]:
    """The one record loop: each record goes to the result file the moment it exists (so a crash
    later loses nothing measured), with a status line on stderr; returns them all."""
    rows = []
    try:
        with err.status("") as status:
            for rec in records:
                sink.append(rec)
                rows.append(rec)
                count = f"[{len(rows)}/{total}] " if total else ""
                status.update(f"{count}{rec.get('variant')} {rec.get('params') or ''} {rec.get('shape')}: "
                              f"{rec.get('status')}")
    finally:
        sink.close()
    return rows
