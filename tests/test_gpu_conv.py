"""On the GPU: every convolution path against the float64 reference (outputs poisoned first) on
the named layer sets, odd sizes and strides included, and both pooling kernels."""

import numpy as np
import pytest

from nnbench import harness, measure, workloads
from nnbench.workloads.base import Case
from nnbench.workloads.conv import launch as conv_launch
from nnbench.workloads.conv import problem as conv_problem
from nnbench.workloads.conv import reference as conv_ref
from nnbench.workloads.conv import session as conv

ConvShape = conv_problem.ConvShape

pytestmark = pytest.mark.gpu

FAST = measure.TimingSettings(budget_s=0.02, min_samples=3, max_noise=1.0)


@pytest.mark.parametrize("set_name", ["odd", "lenet5", "resnet"])
def test_every_path_matches_the_reference(cuda_backend, set_name):
    shapes = conv_problem.load_sets()[set_name]
    if set_name == "resnet":
        shapes = shapes[:1] + shapes[2:]  # the target layer and the strided one
    cases = [Case(v, tuple(p.items())) for v, p in conv.plan([], "cuda", {})]
    recs = list(harness.run(conv.WORKLOAD, cuda_backend, cases, shapes, FAST, conv_problem.DEFAULT_RTOL, seed=0))
    assert any(r["variant"] == "cudnn" for r in recs)
    for r in recs:
        if r["variant"] == "cudnn" and r["status"] == "SKIP":
            continue
        assert r["status"] == "PASS", (r["variant"], r["shape"], r.get("rel_err"), r.get("error"))


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("shape,S", [((2, 3, 28, 28), 2), ((1, 5, 13, 11), 3)])
def test_pooling(cuda_backend, mode, shape, S):
    x = conv_ref.random_nonzero(np.random.default_rng(0), shape)
    assert conv.pool_check(cuda_backend, mode, x, S) <= conv.bounds.pool_limit(mode, S)


@pytest.mark.parametrize("set_name", ["odd", "lenet5", "resnet"])
def test_backward_paths_match_the_reference(cuda_backend, set_name):
    """dX and dW of both backward paths against float64 (both poisoned first)."""
    shapes = conv_problem.load_sets()[set_name][:2]
    cases = [Case.defaults(v) for v in workloads.variants_of("conv", kinds=("backward",))]
    recs = list(harness.run(conv.WORKLOAD, cuda_backend, cases, shapes, FAST, conv_problem.DEFAULT_RTOL, seed=0,
                            vendor=False))
    assert len(recs) == len(cases) * len(shapes)
    for r in recs:
        assert r["status"] == "PASS", (r["variant"], r["shape"], r.get("rel_err"), r.get("error"))


def test_every_path_passes_the_audits(cuda_backend):
    """Every forward and backward GPU path on an odd layer: the last timed batch poisoned and checked, the inputs
    unchanged, a fresh (negated) problem at other addresses checked, zeros not passing: none fails
    (nnbench/audit.py)."""
    shape = ConvShape(2, 3, 13, 11, 5, 3, 1, 1)
    cases = [Case(v, tuple(p.items())) for v, p in conv.plan([], "cuda", {})] + \
        [Case.defaults(v) for v in workloads.variants_of("conv", kinds=("backward",))]
    recs = list(harness.run(conv.WORKLOAD, cuda_backend, cases, [shape], FAST, conv_problem.DEFAULT_RTOL, seed=0,
                            vendor=False))
    assert len(recs) == len(cases)
    for r in recs:
        assert r["status"] in ("PASS", "SKIP") and not (r["status"] == "PASS" and r.get("error")), r


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("shape,S", [((2, 3, 28, 28), 2), ((1, 5, 13, 11), 3)])
def test_pooling_backward(cuda_backend, mode, shape, S):
    x = conv_ref.random_nonzero(np.random.default_rng(1), shape)
    assert conv.pool_backward_check(cuda_backend, mode, x, S) <= conv.bounds.pool_limit(mode, S)


@pytest.mark.parametrize("batch", [64, 50])
def test_lenet5_step_matches_the_reference(cuda_backend, batch):
    """One SGD step of LeNet-5 on our kernels against float64 (weight changes and loss), and
    PyTorch's first loss on the same weights and images agrees with the reference."""
    from nnbench.workloads.conv import lenet
    recs = {r["variant"]: r for r in lenet.run(cuda_backend, batch, settings=FAST)}
    assert recs["lenet5-step"]["status"] == "PASS", recs["lenet5-step"]["rel_err"]
    assert recs["lenet5-step-graph"]["status"] == "PASS", recs["lenet5-step-graph"]["rel_err"]
    assert recs["lenet5-forward"]["median_ms"] > 0
    if "torch-step" in recs:
        assert recs["torch-step"]["status"] == "PASS", recs["torch-step"]["rel_err"]


def test_a_lenet5_graph_missing_its_update_fails_the_check(cuda_backend):
    """The graph row is checked through its graph: captured without the step's last launch (the one
    SGD update of the whole model), its first step fails against float64; whole, it passes."""
    from nnbench.workloads.conv import lenet
    x, labels = lenet.images(2, 0)
    params = lenet.init_params(0)
    ref_loss, ref_params, _ = lenet.reference_step(params, x, labels, 0.05)
    limit = lenet.check_limit(params, x, labels, 0.05, ref_loss, ref_params)
    for drop, ok in ((0, True), (1, False)):
        net = lenet.GpuLeNet(cuda_backend, params, x, labels, 0.05)
        launches = net.step_launches[:len(net.step_launches) - drop]
        graph = cuda_backend.capture(net.callable(launches))
        assert graph.nodes >= len(launches)
        err = lenet.first_step_error(net, graph, params, ref_loss, ref_params)
        assert (err <= limit) == ok, (drop, err, limit)


@pytest.mark.parametrize("shape", [ConvShape(2, 3, 13, 11, 5, 3, 1, 1), ConvShape(4, 64, 14, 14, 64, 3)],
                         ids=lambda s: s.label)
def test_a_kernel_that_skips_an_output_channel_fails_verification(cuda_backend, shape, tmp_path):
    """The direct path patched to leave the last output map unwritten (tests/mutants.py, skip_channel: it
    stays poisoned) fails the suite's own verification; as shipped, it passes."""
    from nnbench.runtime.compile import compile_sources
    from tests import mutants
    v = workloads.get("conv", "direct")
    params = v.defaults()
    real, = compile_sources(cuda_backend.arch, [(v.source, params)])
    with mutants.kernel_root(tmp_path, "skip_channel"):
        mutated, = compile_sources(cuda_backend.arch, [(v.source, params)])
    layer = conv_launch.Layer(cuda_backend, shape, seed=0)
    base = dict(variant="direct")
    limit = conv.bounds.forward_limit(v.precision, shape)
    honest = conv_launch.direct_launch(cuda_backend, v, params, real, layer)
    ok = conv._timed(cuda_backend, dict(base), layer, honest, FAST, limit)
    assert ok["status"] == "PASS", ok["rel_err"]
    broken = conv_launch.direct_launch(cuda_backend, v, params, mutated, layer)
    bad = conv._timed(cuda_backend, dict(base), layer, broken, FAST, limit)
    assert bad["status"] == "FAIL" and bad["rel_err"] > limit


IMPLICIT = [("conv", "implicit-wgmma"), ("conv", "implicit-wgmma-tf32"), ("conv", "implicit-wgmma-backward")]
ODD_LAYERS = [ConvShape(1, 1, 5, 5, 1, 1), ConvShape(5, 7, 17, 19, 130, 3, 3, 1),
              ConvShape(2, 64, 15, 15, 64, 3, 1, 1), ConvShape(3, 4, 9, 10, 66, 2, 2, 0),
              ConvShape(1, 130, 7, 7, 3, 3, 1, 2), ConvShape(2, 3, 12, 12, 5, 3, 2, 1),
              ConvShape(1, 20, 11, 13, 128, 3, 1, 1),  # the data gradient split in 2 (36 k-blocks, 2 tiles)
              ConvShape(1, 2, 19, 18, 3, 16, 1, 1)]  # 16 x 16 taps: the gathers' bounds by row and column


def _implicit(cuda_backend, suite: str, name: str):
    v = workloads.get(suite, name)
    if why := v.arch_problem(cuda_backend.device):
        pytest.skip(why)
    return v


@pytest.mark.parametrize("suite,name", IMPLICIT)
def test_implicit_gemm_paths_on_odd_layers(cuda_backend, suite, name):
    """Conv steps 9 and 10 against float64 on layers no tile divides (odd N, C, H, W, K; 1x1, 2x2 and
    5x5 filters; strides 1 to 3; pads 0 to 2; C*R*R not a multiple of 4, so the filters' cp.async
    path too), with every tile shape."""
    v = _implicit(cuda_backend, suite, name)
    shapes = conv_problem.load_sets()["odd"] + conv_problem.load_sets()["lenet5"] + ODD_LAYERS
    cases = [Case(v, tuple(dict(v.defaults(), **p).items()))
             for p in ({}, {"BM": 64}, {"BN": 128}, {"BM": 64, "BN": 128, "STAGES": 2}, {"PRODUCER_WGS": 1})]
    recs = list(harness.run(conv.WORKLOAD, cuda_backend, cases, shapes, FAST, conv_problem.DEFAULT_RTOL, seed=0,
                            vendor=False))
    assert len(recs) == len(cases) * len(shapes)
    for r in recs:
        assert r["status"] == "PASS", (r["params"], r["shape"], r.get("rel_err"), r.get("error"))


@pytest.mark.parametrize("suite,name,defect,shape", [
    ("conv", "implicit-wgmma", "drop_tap", ConvShape(3, 5, 13, 11, 7, 3, 1, 1)),
    ("conv", "implicit-wgmma-backward", "drop_tap", ConvShape(3, 5, 13, 11, 7, 3, 1, 1)),
    # the data gradient in 2 slices of K (conv_data_slices), the last one never added
    ("conv", "implicit-wgmma-backward", "drop_slice", ConvShape(1, 20, 11, 13, 128, 3, 1, 1)),
    # the forward's K in 2 slices as cluster pairs (conv_forward_pair), rank 1's share never added
    ("conv", "implicit-wgmma", "pair_drop", ConvShape(1, 130, 7, 7, 3, 3, 1, 2)),
    # the data gradient's filters by tensor map from their transposed copy (K*R*R a multiple of 4, stride 1)
    ("conv", "implicit-wgmma-backward", "transpose", ConvShape(2, 6, 13, 11, 8, 3, 1, 1))])
def test_an_implicit_path_with_a_planted_defect_fails_verification(cuda_backend, suite, name, defect, shape,
                                                                  tmp_path):
    """Patched with a test-only defect (tests/mutants.py; drop_tap: the last filter tap is gathered as zero;
    drop_slice: a split data gradient loses a slice; pair_drop: a cluster pair's rank 1 share is lost;
    transpose: the transposed filters lose their last output map), the forward and the backward fail the
    suite's verification; as shipped, they pass. The mutant runs with the kernel root pointed at it, so the
    helper kernels a session builds itself (the filters' transposition) are the mutant's too."""
    from nnbench.runtime.compile import compile_sources
    from tests import mutants
    v = _implicit(cuda_backend, suite, name)
    params = v.defaults()
    real, = compile_sources(v.target(cuda_backend.arch), [(v.source, params)])
    session = conv.WORKLOAD.session(cuda_backend, FAST, conv_problem.DEFAULT_RTOL, 0, {})
    session.prepare(shape)
    case = Case.defaults(v)
    ok = session.run_case(case, shape, real)
    assert ok["status"] == "PASS", ok.get("rel_err")
    with mutants.kernel_root(tmp_path, defect):
        mutated, = compile_sources(v.target(cuda_backend.arch), [(v.source, params)])
        session = conv.WORKLOAD.session(cuda_backend, FAST, conv_problem.DEFAULT_RTOL, 0, {})
        session.prepare(shape)
        bad = session.run_case(case, shape, mutated)
    assert bad["status"] == "FAIL" and bad["rel_err"] > bad["rtol"]
