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
