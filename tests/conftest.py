"""GPU tests carry @pytest.mark.gpu and are skipped, with the reason, where no GPU backend opens. Skips are
summed up once per reason at the end of the run (pyproject's addopts reports only failures and errors one by one)."""

import collections
import functools
import os
from pathlib import Path

import pytest

# Under CI (GitHub Actions and .ci/run set CI=true) a test whose real dependency is missing fails instead of
# skipping: CI that cannot run a test must not pass by leaving it out.
IN_CI = os.environ.get("CI", "").lower() == "true"


def missing(why: str):
    """A test's dependency is missing: skip with `why`, or fail under CI."""
    if IN_CI:
        pytest.fail(f"{why} (CI=true: CI must run this test)", pytrace=False)
    pytest.skip(why)


# Skips that mean "a package or tool the README's test command installs is missing"; under CI they fail.
NO_MPI = "mpirun or mpi4py is not installed"


def _a_missing_dependency(reason: str) -> bool:
    return reason.startswith("could not import") or reason == NO_MPI


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if IN_CI and report.skipped and "gpu" not in item.keywords and isinstance(report.longrepr, tuple):
        reason = report.longrepr[2].removeprefix("Skipped: ")
        if _a_missing_dependency(reason):
            report.outcome = "failed"
            report.longrepr = f"{reason} (CI=true: the test command installs it, so CI must run this test)"


def skip_groups(reports) -> list[tuple[str, int, list[str]]]:
    """(reason, tests, files) per distinct skip reason, the largest group first."""
    groups: dict[str, list[str]] = collections.defaultdict(list)
    for r in reports:
        if isinstance(r.longrepr, tuple) and len(r.longrepr) == 3:
            path, _line, reason = r.longrepr
            groups[reason.removeprefix("Skipped: ")].append(Path(path).name)
    return sorted(((why, len(files), sorted(set(files))) for why, files in groups.items()), key=lambda g: -g[1])


def pytest_terminal_summary(terminalreporter):
    groups = skip_groups(terminalreporter.stats.get("skipped", []))
    if not groups:
        return
    terminalreporter.section("skipped, once per reason", sep="-")
    for why, n, files in groups:
        where = ", ".join(files) if len(files) <= 3 else f"{', '.join(files[:3])} and {len(files) - 3} more files"
        terminalreporter.write_line(f"{n} skipped ({where}): {why}")


@functools.lru_cache(maxsize=1)
def _cuda():
    if os.environ.get("NNBENCH_TEST_NO_GPU") == "1":  # tests/test_skip_summary.py's child pytest
        return None, "no GPU backend: NNBENCH_TEST_NO_GPU=1"
    try:
        from nnbench.runtime.cuda import CudaBackend

        return CudaBackend(0), None
    except Exception as e:  # noqa: BLE001 - any failure means "no GPU here"
        return None, f"no GPU backend: {e}"


def gpu_available() -> bool:
    return _cuda()[0] is not None


def pytest_collection_modifyitems(config, items):
    gpu_items = [i for i in items if "gpu" in i.keywords]
    if gpu_items and not gpu_available():
        skip = pytest.mark.skip(reason=_cuda()[1])
        for item in gpu_items:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def cuda_backend():
    be, why = _cuda()
    if be is None:
        pytest.skip(why)
    return be


# -- MPI (tests/test_dataparallel.py, test_buckets.py, test_search.py: CPU ranks started by mpirun) ----
def mpi_ready() -> bool:
    import shutil
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return shutil.which("mpirun") is not None


needs_mpi = pytest.mark.skipif(not mpi_ready(), reason=NO_MPI)


def mpirun_cmd(n: int, *options: str) -> list[str]:
    """mpirun for n local processes on CI's 2 cores (oversubscribed; as root where CI runs as root)."""
    import os
    return ["mpirun", *options, "-np", str(n), "--oversubscribe"] + (["--allow-run-as-root"] if os.geteuid() == 0
                                                                      else [])


def mpirun_python(n: int, *args: str):
    """n ranks of `python -m mpi4py ARGS` (a script and its arguments)."""
    import subprocess
    import sys
    return subprocess.run([*mpirun_cmd(n), sys.executable, "-m", "mpi4py", *args], capture_output=True, text=True,
                          timeout=300)


def assert_ranks_match_one_process(npz) -> None:
    """tests/mpi/train_ranks.py's weights and error curve (written to npz) against one process training
    Net 1 on the same global batch (96), data and initial weights, to float32 rounding."""
    import numpy as np

    from nnbench import glyphs, nets
    from nnbench.workloads.train import batched, mlp
    got = np.load(npz)
    layers = nets.get(1).layers
    init = mlp.init_params(layers, 0, 4.0)
    one = batched.train_numpy(layers, init, batched.training_set(layers[0], 960, seed=0), glyphs.noisy(60, 1, seed=1),
                              96, 2, mlp.Hyper(rate=3.0, momentum=0.8))
    # The ranks sum each batch's gradients in another order than one process does: both are float32 roundings of
    # the float64 training, and neither is the reference. The limit is the training check's own
    # (batched.check_tolerance): CHECK_FACTOR x the error that float32 makes on these 20 steps in two summation
    # orders against float64, never a constant that one BLAS kernel's order passes and another's fails.
    train = batched.training_set(layers[0], 960, seed=0)
    steps = 2 * len(train) // 96
    both_epochs = train.take(np.tile(np.arange(len(train)), 2))
    hyper = mlp.Hyper(rate=3.0, momentum=0.8)
    ref = batched.reference_weights(init, both_epochs, 96, hyper, steps)
    limit = batched.check_tolerance(init, both_epochs, 96, hyper, steps, ref=ref)
    ranks = [got[f"arr_{i}"] for i in range(len(init))]
    assert mlp.weight_change_error(ranks, ref, init) <= limit
    assert mlp.weight_change_error(one.weights, ref, init) <= limit  # the single process, by the same measure
    # Each epoch's summed squared error is a sum of 960 samples' errors computed from those weights: it moves with
    # them, by the weights' relative error at most times the sensitivity, bounded here by the same limit.
    np.testing.assert_allclose(got["curve"], [e for _, e in one.error_curve], rtol=limit)
