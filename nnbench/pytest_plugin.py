"""nnbench's pytest plugin (entry point `pytest11`): verified, CUDA-event-timed kernels in a test suite.

    def test_vector_add(nnbench_kernel):
        [rec] = nnbench_kernel("examples/vector_add/vector_add.yaml", params={"BLOCK": 256, "ITEMS": 2})
        assert rec["gbs"] > 100

`nnbench_kernel(config, **options)` runs `nnbench.benchmark` (the same verification, with outputs
poisoned first, and the same `measure`, as `nnbench sweep`), fails the test on a FAIL, SUSPECT or ERROR row,
and returns the list of records, one per (case, problem): always a list, so `[rec] = ...` states
that one case is meant and fails loudly where a config matches more. Every record of the session
is saved to one CSV (`--nnbench-save`, default .nnbench/pytest-<time>.csv under the rootdir).
`--nnbench-compare=BASELINE.csv --nnbench-fail=median:5%` runs nnbench's gate on the saved file
against the baseline and fails the session on a regression (SLOWER, FAILED, INVALID, MISSING).
Without a GPU each such test is skipped with the reason.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest

FAIL_FORM = "median:N% (the median may grow by at most N percent), e.g. median:5%"


def pytest_addoption(parser) -> None:
    g = parser.getgroup("nnbench", "nnbench: verified, CUDA-event-timed kernel benchmarks")
    g.addoption("--nnbench-save", metavar="PATH", help="The CSV this session's records go to (a new file).")
    g.addoption("--nnbench-compare", metavar="BASELINE.csv", help="Gate the records against this baseline CSV.")
    g.addoption("--nnbench-fail", metavar="median:N%", default="median:5%",
                help=f"With --nnbench-compare, how much slower counts as a regression: {FAIL_FORM}.")
    g.addoption("--nnbench-device", type=int, default=0, metavar="N", help="The GPU to run on (default 0).")
    g.addoption("--nnbench-backend", default=None, choices=["cuda", "cpu", "auto"],
                help="cuda: skip each kernel test without a GPU; cpu: check the configs' references only (no "
                     "kernel runs); auto: cuda if a GPU works, else cpu. Default: $NNBENCH_BACKEND, else `backend:` "
                     "in ~/.config/nnbench/config.yaml, else cuda (a kernel test that cannot run its kernel is "
                     "skipped, never passed).")


def parse_fail(text: str) -> float:
    """`median:5%` -> 0.05; anything else is a usage error naming the option."""
    m = re.fullmatch(r"\s*median\s*:\s*(\d+(?:\.\d+)?)\s*%\s*", text or "")
    if not m or not 0 <= float(m.group(1)) < 1000:
        raise pytest.UsageError(f"--nnbench-fail {text}: expected {FAIL_FORM}")
    return float(m.group(1)) / 100


class _Recorder:
    def __init__(self, config) -> None:
        self.config = config
        self.records: list[dict] = []
        self.saved: Path | None = None
        self.result = None  # api.CheckResult
        self.tolerance = parse_fail(config.getoption("nnbench_fail"))
        self.backend = _backend(config)  # a bad NNBENCH_BACKEND or config file stops the session at once
        base = config.getoption("nnbench_compare")
        if base and not Path(base).is_file():
            raise pytest.UsageError(f"--nnbench-compare {base}: no such file")

    def save(self) -> Path | None:
        if not self.records:
            return None
        from nnbench import results, safeio
        given = self.config.getoption("nnbench_save")
        if given:
            sink = results.CsvSink(Path(given), mode=safeio.NEW)
        else:
            stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
            folder = Path(self.config.rootpath) / ".nnbench"
            folder.mkdir(exist_ok=True)
            sink = results.CsvSink(folder / f"pytest-{stamp}.csv", mode=safeio.UNIQUE)
        try:
            for rec in self.records:
                sink.append(rec)
        finally:
            sink.close()
        return sink.path


def pytest_configure(config) -> None:
    config.pluginmanager.register(_Recorder(config), "nnbench-recorder")


def _recorder(config) -> _Recorder:
    return config.pluginmanager.get_plugin("nnbench-recorder")


@pytest.fixture
def nnbench_kernel(request):
    """Run a kernel config (a path, a dict, or keywords as in nnbench.benchmark) verified and timed;
    fail the test on a wrong answer or a fault; skip it without a GPU. Returns a list of records, one
    per (case, problem), however many match: `[rec] = nnbench_kernel(...)` for one."""
    rec = _recorder(request.config)
    backend = rec.backend
    device = request.config.getoption("nnbench_device")
    if backend == "cuda":
        from nnbench.errors import BackendUnavailable
        from nnbench.runtime import open_backend
        try:
            open_backend("cuda", device)
        except BackendUnavailable as e:
            pytest.skip(f"nnbench: no GPU backend: {e}")

    def run(config=None, **options):
        import nnbench
        from nnbench import results
        rows = nnbench.benchmark(config, backend=backend, device=device, frame=False, **options)
        for r in rows:
            r["sweep"] = request.node.name
        rec.records += rows
        bad = [r for r in rows if r.get("status") in results.FAILED]
        if bad:
            r = bad[0]
            why = r.get("error") or f"||out-ref||/||ref|| = {r.get('rel_err'):.3g} > rtol {r.get('rtol'):.3g}"
            pytest.fail(f"nnbench: {r['variant']} {r['params']} at {r['shape']}: {r['status']}: {why}", pytrace=False)
        return rows

    return run


def _backend(config) -> str:
    """--nnbench-backend, else NNBENCH_BACKEND or the user's config file, else cuda: unlike the CLI's
    default (auto), a kernel test without a GPU is skipped rather than passed on the references alone."""
    from nnbench.backend_choice import requested
    from nnbench.errors import NnbenchError
    try:
        req = requested(config.getoption("nnbench_backend"))
    except NnbenchError as e:
        raise pytest.UsageError(str(e)) from None
    return "cuda" if req.source == "default" else req.name


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus) -> None:
    rec = _recorder(session.config)
    if rec is None:
        return
    rec.saved = rec.save()
    base = session.config.getoption("nnbench_compare")
    if base and rec.saved is not None:  # no records: every kernel test was skipped (no GPU), and says why
        from nnbench import api
        rec.result = api.check(base, rec.saved, rec.tolerance)
        if not rec.result.passed and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    rec = _recorder(config)
    if rec is None or (not rec.records and not config.getoption("nnbench_compare")):
        return
    tr = terminalreporter
    tr.section("nnbench")
    if rec.saved:
        n = len(rec.records)
        tr.write_line(f"{n} record{'' if n == 1 else 's'} saved to {rec.saved}")
    if rec.result is not None:
        for v in rec.result.verdicts:
            if v.verdict != "SAME":
                change = f" ({100 * v.change:+.1f}%)" if v.change is not None else ""
                tr.write_line(f"{v.verdict:8} {v.variant} {v.params} {v.shape}{change} {v.why}".rstrip())
        word = "passed" if rec.result.passed else "FAILED"
        tr.write_line(f"nnbench gate against {config.getoption('nnbench_compare')} at "
                      f"median:{100 * rec.tolerance:g}%: {word}", red=not rec.result.passed, green=rec.result.passed)
    elif config.getoption("nnbench_compare"):
        tr.write_line("nnbench gate: no records were made (no GPU?), nothing was compared")
