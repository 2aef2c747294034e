"""GPU tests carry @pytest.mark.gpu and are skipped, with the reason, where no GPU backend opens."""

import functools

import pytest


@functools.lru_cache(maxsize=1)
def _cuda():
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


needs_mpi = pytest.mark.skipif(not mpi_ready(), reason="mpirun or mpi4py is not installed")


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
