"""`nnbench check`: the regression gate."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.markup import escape

from nnbench import results
from nnbench.cli import app
from nnbench.cli.app import backend_option
from nnbench.cli.sweep import run_sweep, runs_nothing_on
from nnbench.errors import NnbenchError
from nnbench.report import gate as gatereport
from nnbench.report import tables


# -- check ----------------------------------------------------------------------------------------
class Tolerance(click.ParamType):
    name = "TOLERANCE"

    def convert(self, value, param, ctx):
        if isinstance(value, float):
            return value
        text = str(value).strip()
        try:
            v = float(text[:-1]) / 100 if text.endswith("%") else float(text)
        except ValueError:
            self.fail(f"{value!r}: expected a fraction or a percentage, e.g. 0.05 or 5%", param, ctx)
        if not 0 <= v < 10:
            self.fail(f"{value!r}: expected 0% to 1000%", param, ctx)
        return v


@app.cli.command()
@click.argument("files", nargs=-1, metavar="[BASELINE…] CURRENT.csv", type=click.Path())
@click.option("--tolerance", type=Tolerance(), default=None,
              help="The smallest change of the median that counts (e.g. 5% or 0.05); a rank test on the raw samples "
                   "says whether a change that large is real. Default 5% against a baseline of one run; 2% against "
                   "a baseline of several runs or the history, where each case's tolerance is raised to 5 times its "
                   "between-run spread (docs/gate.md).")
@click.option("--run", "run_config", type=click.Path(dir_okay=False),
              help="Run this sweep config now and check it against --baseline (fresh; where --out names an existing "
                   "file, that file is resumed, its ERROR cases run again).")
@click.option("--baseline", "baseline_path", type=click.Path(), multiple=True,
              help="With --run: the baseline: a result file, or several runs (repeat the option, or name a folder of "
                   "them); default results/baselines/<gpu>/ (a folder of runs) where it exists, else "
                   "results/baselines/<gpu>.csv.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), help="With --run: where the new CSV goes.")
@click.option("--all", "show_all", is_flag=True, help="List SAME cases too.")
@click.option("--any-gpu", is_flag=True, help="Compare even when the two files come from different GPUs.")
@click.option("--allow-missing", is_flag=True, help="Let baseline cases that the current file lacks pass the gate.")
@click.option("--allow-unstable", is_flag=True,
              help="Let UNSTABLE and AMBIGUOUS cases (too noisy or too short to decide) pass the gate.")
@click.option("--format", "fmt", type=click.Choice(gatereport.FORMATS), default="table", show_default=True,
              help="table: rich text. markdown: a GitHub step summary or PR comment. json: for scripts. junit: "
                   "JUnit XML for CI annotations. The other formats print the document alone on stdout.")
@click.option("--retry-errors/--no-retry-errors", default=True, show_default=True,
              help="With --run resuming --out: run again the cases whose last row is ERROR.")
@click.option("--against-history", is_flag=True,
              help="Compare with each case's last stable segment in the history (after its last change point) "
                   "instead of a baseline file; give CURRENT.csv alone, or --run.")
@click.option("--db", "history_db", metavar="PATH|URL", default=None,
              help="With --against-history: the history database (default $NNBENCH_HISTORY_DB, else "
                   "results/history.sqlite).")
@app.json_option
@app.keep_throttled_option
@backend_option
def check(files, tolerance, run_config, baseline_path, out_path, show_all, any_gpu, allow_missing, allow_unstable, fmt,
          retry_errors, backend, against_history=False, history_db=None) -> None:
    """Compare a result file (CSV or --json) against a baseline, case by case, on raw samples. The baseline is
    one result file, or several runs of the same config (files, or a folder of them): then each case carries its
    between-run spread and its tolerance is at least 5 times that (the gate on GPU runners).

    SLOWER or FASTER where the median moved by more than --tolerance and a Mann-Whitney U test on
    the raw samples says so; UNSTABLE or AMBIGUOUS where a side is too noisy or too short to decide;
    files without raw samples (older CSVs) fall back to the IQR rule, and a note says so.

    Exits 1 on any SLOWER, FAILED (FAIL or ERROR row), INVALID (a median that is not a positive
    finite number), MISSING (unless --allow-missing), UNSTABLE or AMBIGUOUS (unless --allow-unstable).

    \b
    Examples:
      nnbench check results/baselines/nvidia-h100-80gb-hbm3.csv results/ci-….csv --tolerance 5%
      nnbench check --run configs/ci.yaml --baseline results/baselines/nvidia-h100-80gb-hbm3/
      nnbench check results/baselines/nvidia-h100-80gb-hbm3/ results/ci-….json
      nnbench check base.csv new.csv --format markdown >> "$GITHUB_STEP_SUMMARY"
      nnbench check --against-history results/ci-….json --format markdown >> "$GITHUB_STEP_SUMMARY"
    """
    history = (against_history, history_db)
    if fmt == "table":
        return _check(files, tolerance, run_config, baseline_path, out_path, show_all, any_gpu, allow_missing,
                      allow_unstable, fmt, retry_errors, backend, history)
    out = app.out
    app.out = app.err  # stdout carries the document alone (a step summary, a JUnit file)
    try:
        _check(files, tolerance, run_config, baseline_path, out_path, show_all, any_gpu, allow_missing, allow_unstable,
               fmt, retry_errors, backend, history)
    finally:
        app.out = out


def _check(files, tolerance, run_config, baseline_path, out_path, show_all, any_gpu, allow_missing, allow_unstable,
           fmt, retry_errors, backend, history=(False, None)) -> None:
    from nnbench import paths, verdict
    from nnbench.sweeps import config
    against_history, history_db = history
    baseline_path = list(baseline_path or [])
    if history_db and not against_history:
        raise NnbenchError("--db applies only with --against-history")
    if against_history and (baseline_path or any_gpu):
        raise NnbenchError("--against-history compares with the history: --baseline and --any-gpu do not apply")
    if against_history and not run_config:
        if len(files) != 1:
            raise NnbenchError("check --against-history needs one CURRENT.csv (or --run CONFIG.yaml)")
    if run_config:
        if files:
            raise NnbenchError("give either BASELINE.csv CURRENT.csv or --run CONFIG.yaml, not both")
        for b in baseline_path:
            if not Path(b).exists():
                raise NnbenchError(f"--baseline {b}: no such file or folder")
        if baseline_path:
            verdict.load_baseline(baseline_path)  # read now: one that cannot be is refused before the sweep runs
        specs = config.load_config(run_config)
        resume = out_path is not None and Path(out_path).exists()
        if app.KEEP_THROTTLED[0]:
            from dataclasses import replace
            specs = [replace(spec, settings=replace(spec.settings, keep_throttled=True)) for spec in specs]
        backend = app.worker_backend(backend)
        if runs_nothing_on(specs, backend):
            # Every case would be a SKIP row: a file of them gates nothing, and a baseline of them would pass forever
            raise NnbenchError(f"--run {run_config}: none of its variants runs on the {backend} backend (its kernels "
                               f"need an NVIDIA GPU); run the gate on the GPU it gates, or compare two result files: "
                               f"nnbench check BASELINE.csv CURRENT.csv")
        current = run_sweep(specs, backend, out_path, not resume, None, retry_errors=retry_errors,
                            show=fmt == "table", json_path=app.JSON[0])[0].path
        if not baseline_path and not against_history:
            gpu = verdict.gpus(verdict.load(current))
            name = results.slug(next(iter(gpu))) if gpu else "cpu"
            runs, one = paths.RESULTS / "baselines" / name, paths.RESULTS / "baselines" / f"{name}.csv"
            if not runs.is_dir() and not one.is_file():
                raise NnbenchError(f"no baseline for this GPU at {runs}/ or {one}; make one of 10 runs with: for i in "
                                   f"$(seq -w 10); do nnbench sweep {run_config} --fresh --out {runs}/run-$i.csv; done")
            baseline_path = [runs if runs.is_dir() else one]
    else:
        if len(files) < (1 if against_history else 2):
            raise NnbenchError("check needs BASELINE.csv and CURRENT.csv (the baseline may be several runs, or a "
                               "folder of them), or --run CONFIG.yaml")
        if baseline_path or out_path:
            raise NnbenchError("--baseline and --out apply only with --run")
        if app.JSON[0] is not None:
            app.refuse_taken(app.JSON[0])
        baseline_path, current = list(files[:-1]), files[-1]
        if Path(current).is_dir():
            raise NnbenchError(f"{current}: the current run is one result file, not a folder")
        for b in baseline_path:
            if not Path(b).exists():
                raise NnbenchError(f"{b}: no such file or folder")
    from nnbench import api
    several = against_history or len(verdict.baseline_files(baseline_path)) > 1
    if tolerance is None:
        tolerance = verdict.default_tolerance(several)
    if against_history:
        from nnbench.history import gate
        result = gate.check(history_db, current, tolerance, allow_missing=allow_missing, allow_unstable=allow_unstable)
        baseline_path = f"the last stable segment of each case in {result.where}"
    else:
        result = api.check(baseline_path, current, tolerance, allow_missing, any_gpu, allow_unstable)
        baseline_path = baseline_path[0] if len(baseline_path) == 1 else " ".join(map(str, baseline_path))
    verdicts = result.verdicts
    if app.JSON[0] is not None and not run_config:  # with --run, --json holds the run's records (as sweep's)
        from nnbench import rawresults
        doc = {"kind": "check", **gatereport.document(verdicts, str(baseline_path), str(current), tolerance,
                                                      result.passed, result.notes)}
        app.out.print(f"JSON: {escape(str(rawresults.write_document(app.JSON[0], 'check', [doc])))}")
    per_case = f", raised per case to {verdict.RUN_SPREAD_K:g}x its between-run spread" if several else ""
    title = (f"check {current} against {baseline_path} · tolerance {100 * tolerance:g}% of the median{per_case}, "
             f"tested by a Mann-Whitney U test on raw samples (p < {verdict.ALPHA:g})")
    if fmt != "table":
        text = {"markdown": lambda: gatereport.markdown(verdicts, title, result.passed, result.notes, show_all),
                "json": lambda: gatereport.to_json(verdicts, str(baseline_path), str(current), tolerance,
                                                   result.passed, result.notes),
                "junit": lambda: gatereport.junit(verdicts, title, allow_missing, allow_unstable)}[fmt]()
        click.echo(text, nl=False)
        if fmt != "markdown":
            for note in result.notes:
                app.err.print(f"note: {escape(note)}", soft_wrap=True)
        sys.exit(0 if result.passed else 1)
    for note in result.notes:
        app.out.print(f"note: {escape(note)}")
    counts = gatereport.summary_counts(verdicts)
    app.out.print(tables.verdict_table(verdicts, title, show_same=show_all))
    app.out.print(" · ".join(f"{n} {name}" for name, n in counts.items()) or "no cases")
    for workload, (g, n) in sorted(verdict.geomean_change(verdicts).items()):
        app.out.print(f"{workload}: geometric-mean change {100 * g:+.2f}% over {n} cases")
    if not result.passed:
        why = ("SLOWER, FAILED, INVALID" + ("" if allow_missing else ", MISSING")
               + ("" if allow_unstable else ", UNSTABLE or AMBIGUOUS"))
        app.out.print(f"[bold red]regression gate: FAILED[/] (a case is {why})")
        sys.exit(1)
    app.out.print("[green]regression gate: passed[/]")

