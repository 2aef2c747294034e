"""nnbench's Python API: the engine under the CLI, for notebooks, scripts and test suites.

    import nnbench
    df = nnbench.benchmark("examples/vector_add/vector_add.yaml", params={"BLOCK": 256})
    run = nnbench.run_sweep("examples/tiled_gemm/tiled_gemm.yaml", out="results/gemm.csv")
    gate = nnbench.check("results/baselines/h100.csv", run.path, tolerance=0.05)
    assert gate.passed, gate.failures

`benchmark` runs in this process (a kernel fault ends the run after its ERROR record); `run_sweep` runs
in a worker process under a watchdog, streams every record to a CSV and resumes it, exactly as
`nnbench sweep` (which calls it). A declaration can also be given as keywords instead of a file:
the keys of a kernel config (docs/API.md), with `reference` a Python callable if you like.
Every user error is an `nnbench.NnbenchError` whose message is the CLI's one line.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from nnbench import apiargs
from nnbench.errors import NnbenchError

ConfigLike = str | Path | dict


@dataclass
class SweepResult:
    """What `run_sweep` made: the result CSV, one outcome per part (sweep.Outcome), and the records."""

    path: Path
    outcomes: list = field(default_factory=list)

    @property
    def failed(self) -> int:
        return sum(o.failed for o in self.outcomes)

    def records(self):
        """The result CSV as a DataFrame (every row, as written)."""
        from nnbench import results
        return results.read_csv(self.path)


@dataclass
class CheckResult:
    """The gate's verdict per case (verdict.Verdict), and whether it passes."""

    verdicts: list
    passed: bool
    notes: list[str] = field(default_factory=list)  # rows set aside in either file (cut short, repeated)

    @property
    def failures(self) -> list:
        from nnbench.verdict import GATING
        return [v for v in self.verdicts if v.verdict in GATING]

    def frame(self):
        import pandas as pd
        return pd.DataFrame([dict(vars(v), change=v.change) for v in self.verdicts])


def load(config: ConfigLike) -> list:
    """A config file (any workload; a kernel config with `workload: kernel`), or a kernel declaration as a
    dict, as validated SweepSpecs (config.SweepSpec), one per part. Raises NnbenchError on bad input."""
    from nnbench.sweeps import config as cfg
    apiargs.config("load", config)
    if isinstance(config, dict):
        apiargs.plain("load", config, callables=("reference",))
        return [_declared(config)]
    return cfg.load_config(Path(config))


def benchmark(config: ConfigLike | None = None, *, backend: str | None = None, device: int = 0,
              variants: Iterable[str] | None = None, params: dict[str, int] | None = None,
              problems: list[dict[str, int]] | None = None, budget: float | None = None, seed: int | None = None,
              frame: bool = True, **declaration: Any):
    """Verify and time a config's cases in this process; return the records (a DataFrame, or a list
    of dicts with frame=False), one per (problem, case), with the comparison columns filled.

    config: a config file, a dict of its keys, or None with the keys as keyword arguments
        (`source=`, `kernel=`, `args=`, `grid=`, `block=`, `problems=`, `reference=` ...; a single
        variant's keys may stand at the top level; `reference` may be a callable).
    variants: run only these variants. params: keep only the cases with these parameter values
        (with keyword declarations: the values themselves). problems: a kernel config's problems
        instead of its own, e.g. [{"N": 4097}]. budget: seconds per case (timing.budget).
    backend: "cuda", "cpu" or "auto" (cuda when a GPU works); None: $NNBENCH_BACKEND, else the user's
        config file (`backend:` in ~/.config/nnbench/config.yaml), else auto. device: the GPU index.
    Every row's `backend` (and the frame's attrs["backend"]) says which ran. On the CPU no user kernel
    runs: a kernel config's row there is its reference, timed and checked, with variant `reference` and
    status REFERENCE. Returns every record with the result CSV's columns (results.FIELDS), each present whatever the
    records hold (`error` is None on a row that passed).
    """
    import numpy as np

    from nnbench import harness, results
    from nnbench.backend_choice import CHOICES
    from nnbench.options import SEED_MAX
    from nnbench.runtime import open_backend
    if config is not None:
        apiargs.config("benchmark", config)
    variants, params = apiargs.names("benchmark", "variants", variants), apiargs.params("benchmark", params)
    problems = apiargs.problems("benchmark", problems)
    budget = apiargs.positive("benchmark", "budget", budget)
    seed = apiargs.count("benchmark", "seed", seed, 0, maximum=SEED_MAX)
    apiargs.choice("benchmark", "backend", backend, CHOICES)
    apiargs.flag("benchmark", "frame", frame)
    apiargs.device("benchmark", backend, device)
    apiargs.plain("benchmark", declaration, callables=("reference",))
    if config is None:
        if not declaration:
            raise NnbenchError("benchmark(): give a config (a file or a dict) or the declaration as keywords")
        config = dict(declaration)
        if params:
            config["params"] = params
        if problems:
            config["problems"] = problems
        params = problems = None
    elif declaration:
        raise NnbenchError(f"benchmark(): give a config or keywords, not both ({', '.join(declaration)})")
    specs = load(config)
    from nnbench.backend_choice import requested
    be, _ = open_backend(requested(backend).name, device)
    env = results.environment(be)
    rows: list[dict] = []
    for spec in specs:
        cases = [c for c in spec.cases if (not variants or c.variant.name in set(variants))
                 and all(c.param_dict.get(k) == v for k, v in (params or {}).items())]
        if not cases:
            raise NnbenchError(f"{spec.path}: no case matches variants={list(variants or [])} params={params}; "
                               f"its cases: {', '.join(sorted({_label(c) for c in spec.cases}))}")
        cases = [c for c in cases if spec.workload.runs_on(c.variant, be.name)]
        if not cases:
            raise NnbenchError(f"{spec.path}: none of the chosen cases runs on the {be.name} backend")
        shapes = _problems(spec, problems) if problems else spec.shapes
        settings = replace(spec.settings, budget_s=budget) if budget else spec.settings
        seed = spec.seed if seed is None else seed
        baseline = spec.baseline if spec.baseline in cases else None
        for rec in harness.run(spec.workload, be, cases, shapes, settings, spec.rtol, seed,
                               dict(env, sweep=spec.name), vendor=spec.vendor, baseline=baseline):
            rows.append(rec)
    if not frame:
        return rows
    import pandas as pd
    df = pd.DataFrame(rows)
    df = df.reindex(columns=results.FIELDS).replace({np.nan: None})
    df.attrs["backend"] = be.name  # also every row's `backend`: with backend="auto", which one ran
    return df


def run_sweep(config: ConfigLike, *, backend: str | None = None, device: int = 0, out: str | Path | None = None,
          fresh: bool = False, jobs: int | None = None, retry_errors: bool = False, load_only: bool = False,
          events: Callable[..., Callable] | None = None, finished: Callable[..., None] | None = None,
          json: str | Path | None = None, gpus: list[int] | None = None, replay: str | Path | None = None,
          mpi: bool = False) -> SweepResult:
    """Run a sweep config as `nnbench sweep` does: every part in a worker process under a watchdog,
    each record appended to the CSV (default: resume the newest results/<name>-<gpu>-*.csv), resumable;
    the parts of a config of several run into the first part's file. With load_only, compile and load
    the kernels and stop. `events(spec)` may return a callback for a part's progress events (the
    CLI's progress bar); `finished(spec, outcome)` is called after each part. With `json`, the records
    and their raw samples also go to that JSON Lines file (docs/JSON.md). `gpus`: one worker per listed
    GPU, into one result file; `replay`: answer every case from a finished result file (no GPU).
    `backend` as in `benchmark` (None: $NNBENCH_BACKEND, else the user's config file, else auto)."""
    from nnbench.backend_choice import CHOICES, requested
    from nnbench.sweeps import sweep as sweep_mod
    apiargs.config("run_sweep", config, specs=True)
    jobs, gpus = apiargs.count("run_sweep", "jobs", jobs, 1), apiargs.gpus("run_sweep", gpus)
    out = apiargs.path("run_sweep", "out", out, optional=True)
    json = apiargs.path("run_sweep", "json", json, optional=True)
    replay = apiargs.path("run_sweep", "replay", replay, optional=True)
    apiargs.choice("run_sweep", "backend", backend, CHOICES)
    for name, value in (("fresh", fresh), ("retry_errors", retry_errors), ("load_only", load_only), ("mpi", mpi)):
        apiargs.flag("run_sweep", name, value)
    apiargs.callback("run_sweep", "events", events), apiargs.callback("run_sweep", "finished", finished)
    apiargs.device("run_sweep", backend, device)
    backend = requested(backend).name
    specs = config if isinstance(config, list) else load(config)
    name = f"{backend}:{device}" if device and backend != "cpu" else backend
    outcomes = []
    for i, spec in enumerate(specs):
        later = i > 0 and not load_only
        opts = sweep_mod.RunOptions(name, outcomes[0].path if later else out, fresh and not later, append=later,
                                    retry_errors=retry_errors, json_out=Path(json) if json else None, jobs=jobs,
                                    load_only=load_only, gpus=tuple(gpus or ()),
                                    replay=Path(replay) if replay else None, mpi=mpi)
        outcome = sweep_mod.execute(spec, opts, events(spec) if events else None)
        outcomes.append(outcome)
        if finished:
            finished(spec, outcome)
    return SweepResult(outcomes[0].path, outcomes)


def check(baseline: str | Path | list, current: str | Path, tolerance: float = 0.05, allow_missing: bool = False,
          any_gpu: bool = False, allow_unstable: bool = False) -> CheckResult:
    """The regression gate: each case of `current` against `baseline`, one result file or several runs (files, or
    a folder of them: verdict.load_baseline pools them, and each case's tolerance is at least 5 times its
    between-run spread) (SLOWER, FASTER, SAME, UNSTABLE,
    AMBIGUOUS, FAILED, INVALID, MISSING, NEW, SKIPPED; nnbench/verdict.py says how: a rank test on raw
    samples where both files have them). `passed` is False on any SLOWER, FAILED, INVALID, MISSING
    (unless allow_missing) or UNSTABLE/AMBIGUOUS (unless allow_unstable)."""
    from nnbench import verdict
    tolerance = apiargs.tolerance("check", tolerance)
    for name, value in (("allow_missing", allow_missing), ("any_gpu", any_gpu), ("allow_unstable", allow_unstable)):
        apiargs.flag("check", name, value)
    baseline, current = apiargs.baseline("check", baseline), apiargs.path("check", "current", current)
    base, cur = verdict.load_baseline(baseline), verdict.load(current)
    gb, gc = verdict.gpus(base), verdict.gpus(cur)
    if gb and gc and gb != gc and not any_gpu:
        raise NnbenchError(f"the baseline comes from {', '.join(sorted(gb))} and the current run from "
                           f"{', '.join(sorted(gc))}; compare like with like, or pass --any-gpu")
    found = verdict.compare(base, cur, tolerance)
    notes = base.attrs.get("notes", []) + cur.attrs.get("notes", [])
    if (fallback := verdict.methods_note(found)) is not None:
        notes.append(fallback)
    return CheckResult(found, not verdict.gated(found, allow_missing, allow_unstable), notes)


# -- helpers --------------------------------------------------------------------------------------
def _label(case) -> str:
    return f"{case.variant.name} {case.param_label}".strip()


def _problems(spec, problems: list[dict[str, int]]) -> list:
    from nnbench import memory
    from nnbench.workloads.base import problem_text
    from nnbench.workloads.kernel.session import MAX_PROBLEMS, KernelProblem, footprint
    if spec.workload_name != "kernel":
        raise NnbenchError("benchmark(problems=...): applies to kernel configs; other workloads take their shapes "
                           "from the config")
    if len(problems) > MAX_PROBLEMS:  # as a config's problems: each is built, checked and run
        raise NnbenchError(f"benchmark(problems=...): {len(problems):,} problems; at most {MAX_PROBLEMS:,}")
    spec_k = spec.shapes[0].spec
    names = list(spec.shapes[0].as_dict())
    out = []
    for p in problems:
        if sorted(p) != sorted(names) or not all(isinstance(v, int) and v >= 1 for v in p.values()):
            raise NnbenchError(f"benchmark(problems=...): {p} must give each of {', '.join(names)} as an integer >= 1")
        problem = KernelProblem(tuple((k, p[k]) for k in names), spec_k)
        try:  # estimated before any array is made, as every problem of a config is
            memory.require_host(footprint(problem)[0], f"benchmark(problems=...): {problem_text(problem)}",
                                "smaller problems")
        except (OverflowError, ValueError) as e:
            raise NnbenchError(f"benchmark(problems=...): {p}: {e}") from None
        out.append(problem)
    return out


def _declared(decl: dict) -> Any:
    """A kernel declaration given as Python values: written as YAML into a temporary file (paths made
    absolute from the working directory) and loaded like a file, so its errors are the file's."""
    import yaml

    from nnbench.workloads.kernel import session as kernel
    d = dict(decl)
    if "suite" not in d:  # the key's old name, read as workload
        d.setdefault("workload", "kernel")
    d.setdefault("name", "api")
    single = {k: d.pop(k) for k in ("kernel", "grid", "block", "shared", "axes", "restrict") if k in d}
    if "params" in d:  # keyword declarations: fixed parameter values are one-value axes
        single.setdefault("axes", {}).update({k: [v] for k, v in d.pop("params").items()})
    if single:
        if "variants" in d:
            raise NnbenchError("benchmark(): give `variants` or one variant's keys (kernel, grid, block), not both")
        d["variants"] = {single.get("kernel", "main"): single}
    for key in ("source", "include"):
        if key in d:
            d[key] = [str(Path(s).resolve()) for s in d[key]] if isinstance(d[key], list) else str(
                Path(d[key]).resolve())
    ref = d.get("reference")
    if callable(ref):
        mod = getattr(ref, "__module__", "") or ""
        name = f"{mod}.{getattr(ref, '__qualname__', 'reference')}"
        d["reference"] = f"{kernel.CALLABLE_MODULE}:{_key(name)}"
        kernel.CALLABLES[_key(name)] = ref
    try:
        text = yaml.safe_dump(d, sort_keys=False)
    except yaml.YAMLError as e:
        raise NnbenchError(f"benchmark(): the declaration is not plain data: {e}") from None
    folder = Path(tempfile.mkdtemp(prefix="nnbench-api-"))
    path = folder / f"{d['name']}.yaml"
    path.write_text(text)
    from nnbench.sweeps import config
    return config.kernel_sweep(kernel.load(path))


def _key(name: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in name)
