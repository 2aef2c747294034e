"""The MLP on the CPU: the data, the nets' sizes against the seed, the reference's gradient
against finite differences, one update against the optimizer's definition, and convergence."""

import re

import numpy as np
import pytest

from nnbench import glyphs, nets, workloads
from nnbench.errors import NnbenchError
from nnbench.workloads.train import mlp


def test_every_letter_has_its_ascii_target_and_a_distinct_bitmap():
    assert list(glyphs.target("A")) == [1, 0, 0, 0, 0, 0, 1]
    assert list(glyphs.target("r")) == [1, 1, 1, 0, 0, 1, 0]
    for c in glyphs.LETTERS:
        assert int("".join(str(int(b)) for b in glyphs.target(c)), 2) == ord(c)
    for bits, (cols, rows) in glyphs.ENCODINGS.items():
        d = glyphs.clean(bits)
        assert d.x.shape == (52, bits) and glyphs.bitmap("Q", bits).shape == (rows, cols)
        assert len({tuple(r) for r in d.x}) == 52


def test_noisy_letters_are_reproducible_and_distorted():
    a, b = glyphs.noisy(120, 3, seed=5), glyphs.noisy(120, 3, seed=5)
    assert np.array_equal(a.x, b.x) and len(a) == 156
    assert not np.array_equal(a.x, glyphs.noisy(120, 3, seed=6).x)
    clean = glyphs.clean(120)
    for i, c in enumerate(a.letters):
        assert np.array_equal(a.t[i], glyphs.target(c))
        assert 0 < np.sum(a.x[i] != clean.x[glyphs.LETTERS.index(c)])


SEED_TOTALS = {"1": 187, "2": 367, "3": 627, "4": 1227, "5": 1027, "6": 2227, "7": 2827, "8": 6727}
SEED_LAYER_COUNTS = {"1": 4, "2": 5, "3": 5, "4": 5, "5": 7, "6": 7, "7": 16, "8": 16}
SEED_WIDEST = {"1": 60, "2": 100, "3": 200, "4": 500, "5": 200, "6": 500, "7": 200, "8": 500}
SEED_MACS = {"1": 7_620, "4": 360_700, "5": 164_700, "6": 860_700, "7": 524_700}


def test_nets_match_the_seed():
    for name, net in nets.load().items():
        assert net.neurons == SEED_TOTALS[name]
        assert len(net.layers) == SEED_LAYER_COUNTS[name]
        assert net.widest_hidden == SEED_WIDEST[name]
        assert net.layers[0] in (60, 120) and net.layers[-1] == 7
        if name in SEED_MACS:
            assert net.feedforward_macs == SEED_MACS[name]
    # The seed says 3,051,400 for Net 8, which its own totals cannot give; these layers give:
    assert nets.get(8).feedforward_macs == 3_110_700
    assert dict(nets.get(2).settings) == {"init_scale": 2.0, "rate": 0.5, "momentum": 0.5, "max_iterations": 2_000_000,
                                          "batch_rate": 3.0}
    assert dict(nets.get(8).settings)["init"] == "centered"


def test_gradient_matches_finite_differences():
    rng = np.random.default_rng(3)
    layers = (60, 9, 8, 7)
    params = mlp.init_params(layers, 1)
    x, t = glyphs.clean(60).x[17], glyphs.clean(60).t[17]
    grads = mlp.gradient(params, x, t)
    h = 1e-6
    for _ in range(40):
        l = rng.integers(len(params))
        i, j = rng.integers(params[l].shape[0]), rng.integers(params[l].shape[1])
        saved = params[l][i, j]
        params[l][i, j] = saved + h
        up = mlp.error(params, x, t)
        params[l][i, j] = saved - h
        down = mlp.error(params, x, t)
        params[l][i, j] = saved
        assert grads[l][i, j] == pytest.approx((up - down) / (2 * h), rel=1e-5, abs=1e-9)


def test_one_step_is_sgd_with_momentum():
    """First step: W -= rate * dE/dW. Second: the change is momentum * first change - rate * grad."""
    layers = (60, 12, 7)
    p = mlp.init_params(layers, 2)
    vel = [np.zeros_like(W) for W in p]
    d = glyphs.clean(60)
    w0 = [W.copy() for W in p]
    g0 = mlp.gradient(p, d.x[0], d.t[0])
    mlp.step(p, vel, d.x[0], d.t[0], 0.3, 0.8)
    for W, W0, g in zip(p, w0, g0):
        np.testing.assert_allclose(W - W0, -0.3 * g, rtol=1e-12, atol=1e-15)
    w1 = [W.copy() for W in p]
    g1 = mlp.gradient(p, d.x[1], d.t[1])
    mlp.step(p, vel, d.x[1], d.t[1], 0.3, 0.8)
    for W, W1, W0, g in zip(p, w1, w0, g1):
        np.testing.assert_allclose(W - W1, 0.8 * (W1 - W0) - 0.3 * g, rtol=1e-10, atol=1e-14)


def test_net_1_learns_the_letters():
    """200 epochs of the 52 clean letters (10,400 per-sample iterations) at a gentle rate: the mean
    error falls from ~1 to under 0.02 and at least 50 letters come out exactly right."""
    layers = nets.get(1).layers
    params = mlp.init_params(layers, 0)
    vel = [np.zeros_like(W) for W in params]
    d = glyphs.clean(60)
    first = last = None
    for _ in range(200):
        err = sum(mlp.step(params, vel, d.x[s], d.t[s], 0.2, 0.5) for s in range(52)) / 52
        first = err if first is None else first
        last = err
    outs = np.stack([mlp.forward(params, x)[-1] for x in d.x])
    assert first > 0.5 and last < 0.02, (first, last)
    assert mlp.accuracy(outs, d.t) >= 50 / 52


def test_sequential_version_stops_at_tolerance_or_limit():
    layers = (60, 20, 7)
    init = mlp.init_params(layers, 0)
    d = glyphs.clean(60)
    out = mlp.train_sequential(layers, init, d, d, mlp.Hyper(max_iterations=130))
    assert out.steps == 130 and not out.converged and out.seconds_per_step > 0
    loose = mlp.train_sequential(layers, init, d, d, mlp.Hyper(tolerance=10.0, max_iterations=10_000))
    assert loose.converged and loose.steps == 52


def test_an_epoch_is_accounted_once_whoever_trains_it():
    """record_epoch, shared by every training loop (and lab/scripts/converge_together.py): a cut-short
    last epoch counts its samples but neither sets the error nor converges; the tolerance is
    compared in float32, as the fused kernel compares it."""
    hyper = mlp.Hyper(tolerance=1e-5)
    out = mlp.Outcome("x")
    mlp.record_epoch(out, hyper, 52, 52, 2e-5)
    assert (out.steps, out.final_error, out.converged) == (52, 2e-5, False)
    mlp.record_epoch(out, hyper, 52, 10, 1e-9)  # cut short: not the net's error
    assert (out.steps, out.final_error, out.converged) == (62, 2e-5, False)
    mlp.record_epoch(out, hyper, 52, 52, float(np.float32(1e-5)))  # equal in float32
    assert out.converged and out.error_curve == [(52, 2e-5), (62, 1e-9), (114, float(np.float32(1e-5)))]
    first = mlp.Outcome("y")
    mlp.record_epoch(first, hyper, 52, 10, 3e-3)  # a run shorter than an epoch still reports its error
    assert first.final_error == 3e-3 and not first.converged


def test_flop_counts():
    assert mlp.flops_per_feedforward((60, 60, 7)) == 2 * (60 * 61 + 7 * 61)
    assert mlp.flops_per_iteration((60, 60, 7)) == 2 * (60 * 61 + 7 * 61) + 2 * (7 * 61) + 5 * (60 * 61 + 7 * 61)


# -- the fused version's model (nnbench/workloads/train/fused.py) -------------------------------------------
def test_fused_rows_cover_every_layer_once():
    from nnbench.workloads.train import fused
    for layers in [nets.get(n).layers for n in "18"] + [(60, 7), (120, 3, 300, 7)]:
        for g in (1, 7, 33, 132):
            rows = fused.rows_per_block(layers, g)
            assert rows.sum(axis=1).tolist() == list(layers[1:])
            assert rows.max() - rows.min(axis=1).min() <= max(layers[1:]) // g + 1


def test_fused_barrier_count_and_shared_memory():
    from nnbench.workloads.train import fused
    assert fused.phases_per_iteration(nets.get(8).layers) == 28  # against 2L + 1 = 31 naive phases
    assert fused.barriers_per_iteration(nets.get(8).layers) == 28
    for exchange in ("partials", "columns"):  # their phases are tagged values
        assert fused.barriers_per_iteration(nets.get(8).layers, exchange) == 0
    assert fused.barriers_per_iteration(nets.get(1).layers) == 4
    assert fused.barriers_per_iteration((60, 7)) == 0
    # one block holds all of Net 1: 2 x (60 + 60 + 7 rows of 64 floats) + 64 staged + 60 deltas
    assert fused.smem_bytes(nets.get(1).layers, 1) == 4 * (2 * 127 * 64 + 64 + 60)
    # the tagged ones keep every layer's input (64 + 64 + 64 floats), 127 outputs and 127 deltas
    # instead, and room for the backward: fused-partials' 60 x 1 partial sums of a phase, fused's
    # deltas of the widest layer above the first (60 of Net 1's [60, 60, 7]), 16-byte aligned
    tagged = 4 * (2 * 127 * 64 + 3 * 64 + 2 * 127)
    assert fused.smem_bytes(nets.get(1).layers, 1, "partials") == tagged + 4 * 60
    assert fused.smem_bytes(nets.get(1).layers, 1, "columns") == tagged + 4 * (60 + 3)  # 16-byte aligned
    # on 132 blocks fused-partials' room is 4 rows x 132 partial sums, fused's 500 deltas
    n8 = nets.get(8).layers
    assert fused.smem_bytes(n8, 132, "partials") - fused.smem_bytes(n8, 132, "columns") == 4 * (4 * 132 - 503)
    # Net 8 on 132 SMs fits every way in the H100's 227 KiB (fused in about 218 KiB, 223 with
    # the output layer in every block)
    for exchange in fused.EXCHANGES:
        assert fused.smem_bytes(n8, 132, exchange) + fused.STATIC_SMEM_ALLOWANCE <= 227 * 1024
    assert fused.smem_bytes(n8, 132, "columns", out_local=True) + fused.STATIC_SMEM_ALLOWANCE <= 227 * 1024


def test_fused_output_layer_in_every_block():
    """OUT_LOCAL: every block holds all of the output layer (rows and velocities: its 7 rows of 104
    floats twice, where one block held 0 or 1 row), and two backward exchanges go."""
    from nnbench.workloads.train import fused
    n1, n8 = nets.get(1).layers, nets.get(8).layers
    assert fused.phases_per_iteration(n8, out_local=True) == 26
    assert fused.phases_per_iteration(n1, out_local=True) == 2  # the forward's two exchanges alone
    assert fused.phases_per_iteration((60, 7), out_local=True) == fused.phases_per_iteration((60, 7)) == 0
    rows = fused.rows_per_block(n8, 132, out_local=True)
    assert rows[-1].tolist() == [7] * 132 and (rows[:-1] == fused.rows_per_block(n8, 132)[:-1]).all()
    assert fused.rows_per_block((60, 7), 5, out_local=True).sum() == 7  # one layer: nothing to replicate
    # the fullest block keeps 6 or 7 output rows more (stride 104, weights and velocities, and an
    # output and a delta each)
    grown = fused.smem_bytes(n8, 132, "columns", True) - fused.smem_bytes(n8, 132, "columns")
    assert 4 * (6 * (2 * 104 + 2)) <= grown <= 4 * (7 * (2 * 104 + 2))


def test_fused_keeps_the_exchange_buffers_the_kernels_address():
    from nnbench.workloads.train import fused
    layers = nets.get(1).layers  # [60, 60, 60, 7]: padded outputs 60 + 60 + 8
    assert fused.exchange_words(layers, 5, "barrier") == 128
    assert fused.exchange_words(layers, 5, "partials") == 2 * 5 * (60 + 60)  # tagged: 2 words a value
    assert fused.transposed_weights(layers) == 60 * 60 + 60 * 8  # columns padded to 4
    assert fused.exchange_words(layers, 5, "columns") == 2 * 128 + 2 * (60 * 60 + 60 * 8)
    assert [fused.exchange_of(v.tags) for v in mlp.versions("cuda") if "fused" in v.tags] == list(fused.EXCHANGES)


def test_fused_refuses_what_cannot_run():
    from nnbench.runtime.device import for_arch
    from nnbench.workloads.train import fused
    dev = for_arch("sm_90")
    dev.sm_count = 132
    assert fused.grid(dev, 56, 3000, 256, nets.get(8).layers, None) == (132, fused.smem_bytes(nets.get(8).layers, 132))
    with pytest.raises(NnbenchError, match="shared memory"):
        fused.grid(dev, 56, 3000, 256, nets.get(8).layers, 66)  # Net 8 does not fit on 66 SMs
    with pytest.raises(NnbenchError, match="resident"):
        fused.grid(dev, 56, 3000, 256, nets.get(1).layers, 132 * 8 + 1)
    with pytest.raises(NnbenchError, match="at most 256 blocks"):
        fused.grid(dev, 56, 3000, 256, nets.get(1).layers, 300, flag_barrier=True)


def test_centered_init_keeps_letters_apart_through_net_7():
    """Why Nets 7 and 8 need it: from Glorot weights every letter reaches the same last hidden
    activations (the net cannot learn); from centered weights the letters stay apart."""
    layers = nets.get(7).layers
    x = glyphs.clean(120).x

    def spread(params):
        h = np.stack([mlp.forward(params, xi)[-2] for xi in x])
        return float(np.sqrt(((h - h.mean(0)) ** 2).mean()))

    assert spread(mlp.init_params(layers, 0, 4.0, "glorot")) < 1e-3
    assert spread(mlp.init_params(layers, 0, 5.0, "centered")) > 0.1
    W = mlp.init_params(layers, 0, 5.0, "centered")[3]
    assert np.allclose(W[:, -1], -0.5 * W[:, :-1].sum(axis=1))  # zero-mean pre-activations at inputs 0.5


def test_hyper_takes_the_users_value_then_the_nets_then_the_default():
    net8 = dict(nets.get(8).settings)
    h = mlp.Hyper.from_settings(net8, rate=0.5, momentum=None, tolerance=None)
    assert (h.rate, h.momentum, h.init, h.max_iterations) == (0.5, net8["momentum"], "centered", 2_000_000)
    assert h.tolerance == mlp.DEFAULT_TOLERANCE and mlp.Hyper.from_settings({}) == mlp.Hyper()


def test_batched_step_is_the_mean_of_per_sample_gradients():
    """With momentum 0 and fresh velocities, a batch step moves the weights by -rate times the mean
    of the per-sample gradients (mlp.gradient, itself checked against finite differences); with
    B = 1 it is exactly the per-sample step."""
    from nnbench.workloads.train import batched
    layers = (60, 9, 8, 7)
    init = mlp.init_params(layers, 3, 4.0)
    data = batched.training_set(60, 13, seed=5)  # an odd batch of 13 noisy letters
    params, vel = [W.copy() for W in init], [np.zeros_like(W) for W in init]
    e = batched.step(params, vel, data.x, data.t, 0.7, 0.0)
    grads = [mlp.gradient(init, x, t) for x, t in zip(data.x, data.t)]
    for l, W0 in enumerate(init):
        mean = np.mean([g[l] for g in grads], axis=0)
        np.testing.assert_allclose(params[l] - W0, -0.7 * mean, rtol=1e-10, atol=1e-13)
    assert e == pytest.approx(np.mean([mlp.error(init, x, t) for x, t in zip(data.x, data.t)]), rel=1e-12)
    one, v1 = [W.copy() for W in init], [np.zeros_like(W) for W in init]
    ref, vr = [W.copy() for W in init], [np.zeros_like(W) for W in init]
    for s in range(3):
        batched.step(one, v1, data.x[s:s + 1], data.t[s:s + 1], 0.3, 0.8)
        mlp.step(ref, vr, data.x[s], data.t[s], 0.3, 0.8)
    for a, b in zip(one, ref):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def test_batched_gemm_shapes_and_flops():
    from nnbench.workloads.train import batched
    layers = nets.get(8).layers
    shapes = batched.gemm_shapes(layers, 4096)
    assert len(shapes) == 3 * 15 - 1  # the first layer's input needs no delta
    assert shapes[0] == ("forward", 500, 4096, 121) and shapes[1] == ("weight-gradient", 121, 500, 4096)
    assert ("backward-data", 500, 4096, 500) in shapes
    macs = sum(n_out * (n_in + 1) for n_in, n_out in zip(layers, layers[1:]))
    assert batched.flops_per_step(layers, 4096) == pytest.approx(
        2 * 4096 * (2 * macs + sum(a * b for a, b in zip(layers[1:-1], layers[2:]))) + 5 * macs)


def test_batched_training_set_interleaves_letters():
    from nnbench.workloads.train import batched
    d = batched.training_set(120, 1000, seed=0)
    assert len(d) == 1000 and d.letters[:52] == list(glyphs.LETTERS)
    assert set(d.letters[52:104]) == set(glyphs.LETTERS)


def test_batched_numpy_learns_net_1():
    """Five epochs of batch 64 over 2,048 noisy letters lift Net 1 well above chance (1/128)."""
    from nnbench.workloads.train import batched
    layers = nets.get(1).layers
    init = mlp.init_params(layers, 0, 4.0)
    train = batched.training_set(60, 2048, seed=0)
    test = glyphs.noisy(60, 2, seed=1)
    out = batched.train_numpy(layers, init, train, test, 64, 5, mlp.Hyper(rate=3.0))
    assert out.steps == 5 * 32 and out.error_curve[-1][1] < out.error_curve[0][1]
    assert out.test_accuracy > 0.2


def test_a_parameter_set_is_parsed_over_the_defaults_and_checked():
    kcm = workloads.get("train", "kcm")
    assert kcm.parse_params("") == {"THREADS": 32}
    assert kcm.parse_params("THREADS=1") == {"THREADS": 1}
    for bad, says in (("THREADS=7", "allows THREADS in {1, 32, 64, 128, 256}"), ("WPT=2", "NAME one of THREADS"),
                      ("THREADS", "not NAME=INTEGER"), ("THREADS=x", "not NAME=INTEGER")):
        with pytest.raises(NnbenchError, match=re.escape(says)):
            kcm.parse_params(bad)


def test_wgmma_net_keeps_weights_neuron_major_and_reads_them_back():
    """batched-wgmma's weights live on the GPU neuron-major (column i = input i's weights to every
    neuron, bias column last, rows padded to a multiple of 4): the host's layout conversion both ways,
    on a stand-in for the device memory. Planted: a download without the transpose fails."""
    from nnbench.workloads.train import batched

    class Memory:  # upload/download as the CUDA backend does them, on host arrays
        def upload(self, a):
            return a.copy()

        def download(self, buf, like):
            like[...] = buf.reshape(like.shape)
            return like

    net = batched.WgmmaNet.__new__(batched.WgmmaNet)
    net.be = Memory()
    rng = np.random.default_rng(0)
    W = [rng.standard_normal((7, 101)), rng.standard_normal((5, 3))]
    bufs = [net.be.upload(net._padded(w, l)) for l, w in enumerate(W)]
    assert bufs[0].shape == (101, 8) and bufs[0][100, 6] == np.float32(W[0][6, 100]) and not bufs[0][:, 7].any()
    net.W = bufs
    back = net.weights(W)
    for w, b in zip(W, back):
        assert b.shape == w.shape and np.allclose(b, w.astype(np.float32))
    planted = bufs[0][:, :7].reshape(7, 101)  # planted: the neuron-major buffer read as if input-major
    assert not np.allclose(planted, W[0].astype(np.float32))


@pytest.mark.parametrize("net", range(1, 9))
def test_the_per_sample_reference_is_the_batch_math_at_one(net):
    """mlp.reference_weights (the float64 reference of every per-sample check) runs the mini-batch math at
    batches of one; it equals the seed's per-sample step (mlp.step: matrix-vector products, outer
    products) to float64 rounding on Nets 1-8, past the end of the training set included."""
    layers = nets.get(net).layers
    hyper = mlp.Hyper.from_settings(dict(nets.get(net).settings))
    init = mlp.init_params(layers, 0, hyper.init_scale, hyper.init)
    data = glyphs.clean(layers[0]).take(slice(0, 3))  # 5 iterations wrap around 3 samples
    seed = [W.copy() for W in init]
    vel = [np.zeros_like(W) for W in init]
    for s in range(5):
        mlp.step(seed, vel, data.x[s % 3], data.t[s % 3], hyper.rate, hyper.momentum)
    for got, want, W0 in zip(mlp.reference_weights(init, data, hyper, 5), seed, init):
        np.testing.assert_allclose(got - W0, want - W0, rtol=1e-9, atol=1e-14 * np.abs(W0).max())
