"""On the GPU: every convolution path against the float64 reference (outputs poisoned first) on
the named layer sets, odd sizes and strides included, and both pooling kernels."""

import numpy as np
import pytest

from nnbench import harness, measure, registry
from nnbench.suites import conv
from nnbench.suites.base import Case

pytestmark = pytest.mark.gpu

FAST = measure.TimingSettings(budget_s=0.02, min_samples=3, max_noise=1.0)


@pytest.mark.parametrize("set_name", ["odd", "lenet5", "resnet"])
def test_every_path_matches_the_reference(cuda_backend, set_name):
    shapes = conv.load_sets()[set_name]
    if set_name == "resnet":
        shapes = shapes[:1] + shapes[2:]  # the target layer and the strided one
    cases = [Case(v, tuple(p.items())) for v, p in conv.plan([], "cuda", {})]
    recs = list(harness.run(conv.WORKLOAD, cuda_backend, cases, shapes, FAST, conv.DEFAULT_RTOL, seed=0))
    assert any(r["variant"] == "cudnn" for r in recs)
    for r in recs:
        if r["variant"] == "cudnn" and r["status"] == "SKIP":
            continue
        assert r["status"] == "PASS", (r["variant"], r["shape"], r.get("rel_err"), r.get("error"))


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("shape,S", [((2, 3, 28, 28), 2), ((1, 5, 13, 11), 3)])
def test_pooling(cuda_backend, mode, shape, S):
    x = conv.random_nonzero(np.random.default_rng(0), shape)
    assert conv.pool_check(cuda_backend, mode, x, S) < 1e-6


@pytest.mark.parametrize("set_name", ["odd", "lenet5", "resnet"])
def test_backward_paths_match_the_reference(cuda_backend, set_name):
    """dX and dW of both backward paths against float64 (both poisoned first)."""
    shapes = conv.load_sets()[set_name][:2]
    cases = [Case.defaults(v) for v in registry.suite_variants("conv-backward")]
    recs = list(harness.run(conv.WORKLOAD, cuda_backend, cases, shapes, FAST, conv.DEFAULT_RTOL, seed=0, vendor=False))
    assert len(recs) == len(cases) * len(shapes)
    for r in recs:
        assert r["status"] == "PASS", (r["variant"], r["shape"], r.get("rel_err"), r.get("error"))


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("shape,S", [((2, 3, 28, 28), 2), ((1, 5, 13, 11), 3)])
def test_pooling_backward(cuda_backend, mode, shape, S):
    x = conv.random_nonzero(np.random.default_rng(1), shape)
    assert conv.pool_backward_check(cuda_backend, mode, x, S) < 1e-6


@pytest.mark.parametrize("batch", [64, 50])
def test_lenet5_step_matches_the_reference(cuda_backend, batch):
    """One SGD step of LeNet-5 on our kernels against float64 (weight changes and loss), and
    PyTorch's first loss on the same weights and images agrees with the reference."""
    from nnbench.suites import lenet
    recs = {r["variant"]: r for r in lenet.run(cuda_backend, batch, settings=FAST)}
    assert recs["lenet5-step"]["status"] == "PASS", recs["lenet5-step"]["rel_err"]
    assert recs["lenet5-step-graph"]["status"] == "PASS", recs["lenet5-step-graph"]["rel_err"]
    assert recs["lenet5-forward"]["median_ms"] > 0
    if "torch-step" in recs:
        assert recs["torch-step"]["status"] == "PASS", recs["torch-step"]["rel_err"]


def test_a_lenet5_graph_missing_its_update_fails_the_check(cuda_backend):
    """The graph row is checked through its graph: captured without the step's last launch (the one
    SGD update of the whole model), its first step fails against float64; whole, it passes."""
    from nnbench.suites import lenet
    x, labels = lenet.images(2, 0)
    params = lenet.init_params(0)
    ref_loss, ref_params, _ = lenet.reference_step(params, x, labels, 0.05)
    for drop, ok in ((0, True), (1, False)):
        net = lenet.GpuLeNet(cuda_backend, params, x, labels, 0.05)
        launches = net.step_launches[:len(net.step_launches) - drop]
        graph = cuda_backend.capture(net.callable(launches))
        assert graph.nodes >= len(launches)
        err = lenet.first_step_error(net, graph, params, ref_loss, ref_params)
        assert (err <= lenet.STEP_RTOL) == ok, (drop, err)


@pytest.mark.parametrize("shape", [conv.ConvShape(2, 3, 13, 11, 5, 3, 1, 1), conv.ConvShape(4, 64, 14, 14, 64, 3)],
                         ids=lambda s: s.label)
def test_a_kernel_that_skips_an_output_channel_fails_verification(cuda_backend, shape):
    """The direct path built with the test-only switch -DMUTATE_SKIP_CHANNEL (the last output map is
    never written, so it stays poisoned) fails the suite's own verification; built without it, it passes."""
    from nnbench import registry
    from nnbench.runtime.compile import compile_sources
    v = registry.get("conv", "direct")
    params = v.defaults()
    real, mutated = compile_sources(cuda_backend.arch, [(v.source, params), (v.source, {**params,
                                                                                       "MUTATE_SKIP_CHANNEL": 1})])
    layer = conv._Layer(cuda_backend, shape, seed=0)
    base = dict(variant="direct")
    ok = conv._timed(cuda_backend, dict(base), layer, conv._direct_launch(cuda_backend, v, params, real, layer), FAST,
                     conv.DEFAULT_RTOL)
    assert ok["status"] == "PASS", ok["rel_err"]
    bad = conv._timed(cuda_backend, dict(base), layer, conv._direct_launch(cuda_backend, v, params, mutated, layer),
                      FAST, conv.DEFAULT_RTOL)
    assert bad["status"] == "FAIL" and bad["rel_err"] > conv.DEFAULT_RTOL
