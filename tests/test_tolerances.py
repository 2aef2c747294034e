"""Checks that can fail: a 0.1% error in the training updates, a GEMM that skips its last k-tile and
a convolution that skips an output channel or its last input channels all fail the verification
the suites use, with the tolerances the suites use. On the CPU, so CI runs them: mutated NumPy
outputs go through the suites' own verifier; the real kernels' mutations (the -D switches) are
compiled here and run in tests/test_gpu_gemm.py and tests/test_gpu_conv.py."""

import numpy as np
import pytest

from nnbench import measure, nets, paths, workloads
from nnbench.runtime.compile import CompileRequest, compile_cubin
from nnbench.runtime.cpu import CpuBackend
from nnbench.workloads.conv import launch as conv_launch
from nnbench.workloads.conv import problem as conv_problem
from nnbench.workloads.conv import reference as conv_ref
from nnbench.workloads.gemm import session as gemm
from nnbench.workloads.train import batched, mlp

NETS = [str(i) for i in range(1, 9)]
PLANTED = np.float32(1.001)  # every update 0.1% too large


def net_case(name: str, **given):
    net = nets.get(name)
    hyper = mlp.Hyper.from_settings(dict(net.settings), **given)
    init, train, _ = mlp.data_sets(net.layers, hyper)
    return net, hyper, init, train


@pytest.mark.parametrize("name", NETS)
def test_a_per_sample_update_off_by_a_tenth_of_a_percent_fails_the_check(name):
    _, hyper, init, train = net_case(name)
    ref = mlp.reference_weights(init, train, hyper, mlp.CHECK_ITERATIONS)
    rtol = mlp.check_tolerance(init, train, hyper, ref=ref)
    planted = mlp.float32_weights(init, train, hyper, mlp.CHECK_ITERATIONS,
                                  stepper=lambda p, v, x, t, rate, m: mlp.step(p, v, x, t, rate * PLANTED, m))
    assert mlp.weight_change_error(planted, ref, init) > rtol


@pytest.mark.parametrize("name", NETS)
def test_a_mini_batch_update_off_by_a_tenth_of_a_percent_fails_the_check(name):
    net = nets.get(name)
    settings = dict(net.settings)
    _, hyper, init, _ = net_case(name, rate=settings.get("batch_rate", batched.DEFAULT_RATE))
    batch = 256
    data = batched.training_set(net.layers[0], batch * batched.CHECK_STEPS, seed=0)
    ref = batched.reference_weights(init, data, batch, hyper, batched.CHECK_STEPS)
    rtol = batched.check_tolerance(init, data, batch, hyper)

    def planted_update(params, vel, grads, scale, momentum):
        batched.apply_update(params, vel, grads, scale * PLANTED, momentum)
    planted = batched.float32_weights(init, data, batch, hyper, batched.CHECK_STEPS, update=planted_update)
    assert mlp.weight_change_error(planted, ref, init) > rtol


def test_the_tolerance_is_ten_times_the_float32_error():
    _, hyper, init, train = net_case("3")
    ref = mlp.reference_weights(init, train, hyper, mlp.CHECK_ITERATIONS)
    errs = [mlp.weight_change_error(mlp.float32_weights(init, train, hyper, mlp.CHECK_ITERATIONS, reverse=r), ref, init)
            for r in (False, True)]
    assert errs[0] != errs[1]  # the two orders really round differently
    assert mlp.check_tolerance(init, train, hyper) == pytest.approx(mlp.CHECK_FACTOR * max(errs), rel=1e-12)


# -- GEMM and conv: mutated outputs through the suites' verifier --------------------------------------
BK = 16  # step 8's k-tile (the registry's default)


@pytest.mark.parametrize("shape", [gemm.Shape(97, 61, 301), gemm.Shape(256, 128, 4096)])
def test_a_gemm_that_skips_its_last_k_tile_fails_verification(shape):
    be = CpuBackend()
    bufs = gemm._Buffers(be, gemm.Problem.make(shape, np.random.default_rng(1)))
    kept = (shape.K - 1) // BK * BK  # the k-tiles before the last (a partial one where K % BK)
    A, B, C = bufs.A, bufs.B, bufs.C

    def skipping(alpha, beta):
        return lambda: np.copyto(C, (alpha * (A[:, :kept] @ B[:kept]) + beta * C).astype(np.float32))
    err, _ = gemm._verify(bufs, skipping)
    assert err > gemm.DEFAULT_RTOL
    ok, _ = gemm._verify(bufs, lambda a, b: gemm._numpy_launcher(bufs, a, b))
    assert ok <= gemm.DEFAULT_RTOL


@pytest.mark.parametrize("shape", [conv_problem.ConvShape(2, 3, 13, 11, 5, 3, 1, 1), conv_problem.ConvShape(4, 64, 14, 14, 64, 3)])
def test_a_conv_that_skips_an_output_channel_or_its_last_inputs_fails_verification(shape):
    layer = conv_launch.Layer(CpuBackend(), shape, seed=0)
    s = shape
    w2 = layer.wt.reshape(s.K, -1)
    u = conv_ref.im2col(layer.x, s.R, s.stride, s.pad)
    y = np.stack([w2 @ u[n] for n in range(s.N)]).reshape(layer.ref.shape)
    assert measure.rel_err(y, layer.ref) <= conv_problem.DEFAULT_RTOL
    no_channel = y.copy()
    no_channel[:, -1] = 0.0  # the last output map never computed
    assert measure.rel_err(no_channel, layer.ref) > conv_problem.DEFAULT_RTOL
    kept = (s.C - 1) * s.R * s.R  # the reduction's last input channel skipped
    short = np.stack([w2[:, :kept] @ u[n][:kept] for n in range(s.N)]).reshape(layer.ref.shape)
    assert measure.rel_err(short, layer.ref) > conv_problem.DEFAULT_RTOL


@pytest.mark.parametrize("source,switch,defaults", [
    ("gemm/08_tf32x3.cu", {"MUTATE_SKIP_KTILES": 1}, None),
    ("conv/01_direct.cu", {"MUTATE_SKIP_CHANNEL": 1}, {"TILE": 16}),
])
def test_the_mutation_switches_change_the_machine_code(source, switch, defaults):
    """The -D switches the GPU tests use reach the kernel: the mutated cubin differs from the real one."""
    if defaults is None:
        defaults = workloads.get("gemm", "tf32x3").defaults()
    real = compile_cubin(CompileRequest.make(paths.KERNELS / source, defaults, "sm_90"))
    mutated = compile_cubin(CompileRequest.make(paths.KERNELS / source, {**defaults, **switch}, "sm_90"))
    assert real.cubin.read_bytes() != mutated.cubin.read_bytes()
