"""On the GPU: every MLP version's weight changes after 20 samples against the float64
reference (outputs and deltas poisoned first), on Net 1 and Net 8; and short training runs."""

import numpy as np
import pytest

from nnbench import glyphs, nets
from nnbench.suites import mlp

pytestmark = pytest.mark.gpu

GPU_VERSIONS = [v for v in mlp.versions("cuda")]


@pytest.mark.parametrize("net", ["1", "8"])
def test_every_version_matches_the_reference(cuda_backend, net):
    layers = nets.get(net).layers
    init = mlp.init_params(layers, 0)
    data = glyphs.clean(layers[0])
    chosen = [(v, v.defaults()) for v in GPU_VERSIONS]
    compiled = mlp.compile_versions(cuda_backend.arch, chosen)
    hyper = mlp.Hyper()
    for v, p in chosen:
        err = mlp.check_version(cuda_backend, v, p, compiled[v.name], layers, init, data, hyper)
        assert err <= mlp.CHECK_RTOL, (v.name, err)


def test_versions_train_alike_and_report(cuda_backend):
    """Two epochs on Net 2 through `run`: every version verified, and every version's first-epoch
    error equal to the sequential version's to float32 precision (the trajectories only part,
    chaotically, after many epochs)."""
    layers = nets.get(2).layers
    chosen = mlp.plan([v.name for v in mlp.versions()], "cuda")
    hyper = mlp.Hyper(max_iterations=104)
    recs = list(mlp.run(cuda_backend, chosen, layers, hyper, test_per_letter=2))
    assert [r["status"] for r in recs] == ["PASS"] * len(chosen)
    first = {r["version"]: r["_outcome"].error_curve[0][1] for r in recs}
    for name, e in first.items():
        assert e == pytest.approx(first["sequential"], rel=1e-3), name
    for r in recs:
        assert r["iterations"] == 104 and r["us_per_iteration"] > 0 and r["us_per_feedforward"] > 0
        assert np.isfinite(r["test_accuracy"])
