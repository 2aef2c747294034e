"""The convolution suite on the CPU: im2col against the seed's loops, the float64 reference
against a direct sum, pooling, shape validation, the layer sets, and the CLI's NumPy path."""

import csv

import numpy as np
import pytest
from click.testing import CliRunner

from nnbench import results, workloads
from nnbench.cli import cli
from nnbench.errors import NnbenchError
from nnbench.workloads.conv import problem as conv_problem
from nnbench.workloads.conv import reference as conv_ref

ConvShape = conv_problem.ConvShape

SHAPES = [(2, 3, 7, 9, 3, 1, 0), (1, 2, 8, 5, 3, 2, 1), (2, 1, 11, 6, 5, 2, 2), (1, 4, 5, 5, 5, 1, 0)]


@pytest.mark.parametrize("N,C,H,W,R,stride,pad", SHAPES)
def test_im2col_matches_the_seeds_loops(N, C, H, W, R, stride, pad):
    x = conv_ref.random_nonzero(np.random.default_rng(0), (N, C, H, W))
    np.testing.assert_array_equal(conv_ref.im2col(x, R, stride, pad), conv_ref.im2col_loop(x, R, stride, pad))


@pytest.mark.parametrize("N,C,H,W,R,stride,pad", SHAPES)
def test_reference_is_the_direct_sum(N, C, H, W, R, stride, pad):
    rng = np.random.default_rng(1)
    K = 3
    x, wt = conv_ref.random_nonzero(rng, (N, C, H, W)), conv_ref.random_nonzero(rng, (K, C, R, R))
    s = ConvShape(N, C, H, W, K, R, stride, pad)
    y = np.zeros((N, K, s.Ho, s.Wo))
    for n in range(N):
        for k in range(K):
            for h in range(s.Ho):
                for w in range(s.Wo):
                    for c in range(C):
                        for p in range(R):
                            for q in range(R):
                                hh, ww = h * stride - pad + p, w * stride - pad + q
                                if 0 <= hh < H and 0 <= ww < W:
                                    y[n, k, h, w] += float(x[n, c, hh, ww]) * float(wt[k, c, p, q])
    np.testing.assert_allclose(conv_ref.conv_reference(x, wt, stride, pad), y, rtol=1e-12, atol=1e-12)


def test_pooling_reference():
    x = np.arange(2 * 1 * 5 * 4, dtype=np.float64).reshape(2, 1, 5, 4)
    avg, mx = conv_ref.pool_reference(x, 2, "avg"), conv_ref.pool_reference(x, 2, "max")
    assert avg.shape == (2, 1, 2, 2)  # the fifth row is cut off (floor mode)
    assert avg[0, 0, 0, 0] == (0 + 1 + 4 + 5) / 4 and mx[0, 0, 1, 1] == 15


def test_shape_arithmetic_and_refusals():
    s = ConvShape(32, 64, 56, 56, 64, 3, 1, 1)
    assert (s.Ho, s.Wo) == (56, 56) and s.flops == 2 * 32 * 64 * 64 * 9 * 56 * 56
    assert s.unroll_bytes == 4 * 32 * 56 * 56 * (64 * 9 + 64)  # the K^2 blow-up (9x the input) and Z
    assert tuple(s.dims().tolist()) == (32, 64, 56, 56, 64, 3, 1, 1, 56, 56) and s.dims().itemsize == 40
    assert ConvShape(1, 1, 7, 7, 1, 3, 2, 0).Ho == 3
    for bad, needle in ((ConvShape(1, 1, 4, 4, 1, 5), "--r 5"), (ConvShape(1, 1, 4, 4, 1, 3, 1, -1), "--pad"),
                        (ConvShape(1, 0, 4, 4, 1, 3), "--c 0")):
        with pytest.raises(NnbenchError, match=needle):
            bad.validate()
    tiled, const = workloads.get("conv", "tiled"), workloads.get("conv", "constant")
    assert conv_problem.refusal(tiled, tiled.defaults(), ConvShape(1, 1, 32, 32, 1, 13, 1, 0))
    assert conv_problem.refusal(const, const.defaults(), ConvShape(1, 2048, 8, 8, 4, 3))  # 18,432 floats per map
    assert conv_problem.refusal(const, const.defaults(), ConvShape(1, 128, 8, 8, 128, 3)) is None  # runs in chunks


def test_layer_sets_and_their_errors(tmp_path):
    sets = conv_problem.load_sets()
    assert sets["resnet"][0] == ConvShape(32, 64, 56, 56, 64, 3, 1, 1)
    assert [s.R for s in sets["lenet5"]] == [5, 5]
    bad = tmp_path / "c.yaml"
    bad.write_text("sets:\n  x:\n    - {n: 1, c: 1, h: 4, w: 4, k: 1, r: 3}\n    - {n: 1, c: 1, h: 4, w: 4, k: 1}\n")
    with pytest.raises(NnbenchError, match=r"c.yaml:4: .*'r'"):
        conv_problem.load_sets(bad)
    bad.write_text("sets:\n  x:\n    - {n: 1, c: 1, h: 2, w: 2, k: 1, r: 3}\n")
    with pytest.raises(NnbenchError, match=r"c.yaml:3: sets.x\[0\]: --r 3"):
        conv_problem.load_sets(bad)


@pytest.mark.parametrize("args, needle", [
    (["--n", "1"], "go together"),
    (["--n", "1", "--c", "1", "--h", "3", "--w", "3", "--k", "1", "--r", "5"], "larger than the 3x3 input"),
    (["--n", "1", "--c", "1", "--h", "3", "--w", "3", "--k", "1", "--r", "3", "--pad", "-1"], "--pad -1"),
    (["-p", "winograd"], "--path winograd"),
    (["--set", "alexnet"], "--set alexnet"),
    (["-p", "tiled", "--kb", "5"], "--kb 5"),
])
def test_conv_bad_input(args, needle):
    res = CliRunner().invoke(cli, ["conv", *args])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], res.output


def test_conv_cpu_path(tmp_path):
    path = tmp_path / "c.csv"
    res = CliRunner().invoke(cli, ["conv", "--backend", "cpu", "--set", "odd", "--csv", str(path)])
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader(path.open()))
    assert list(rows[0].keys()) == results.FIELDS
    assert [r["status"] for r in rows] == ["PASS", "PASS"] and all(float(r["rel_err"]) < 1e-5 for r in rows)


@pytest.mark.parametrize("N,C,H,W,R,stride,pad", SHAPES)
def test_backward_reference_against_finite_differences(N, C, H, W, R, stride, pad):
    """col2im is im2col's adjoint, and the gradients of L = <dy, conv(x, w)> match central
    differences (L is linear in each argument, so the difference is exact up to rounding)."""
    rng = np.random.default_rng(2)
    K = 2
    x, wt = rng.standard_normal((N, C, H, W)), rng.standard_normal((K, C, R, R))
    s = ConvShape(N, C, H, W, K, R, stride, pad)
    dy = rng.standard_normal((N, K, s.Ho, s.Wo))
    u = rng.standard_normal((N, C * R * R, s.Ho * s.Wo))
    back = conv_ref.col2im(u, x.shape, R, stride, pad)
    assert np.sum(conv_ref.im2col(x, R, stride, pad) * u) == pytest.approx(np.sum(x * back))
    dx, dw = conv_ref.conv_backward_reference(x, wt, dy, stride, pad)
    assert dx.flags.c_contiguous and dw.flags.c_contiguous  # uploaded as NCHW (a padded view was not)
    loss = lambda xx, ww: float(np.sum(dy * conv_ref.conv_reference(xx, ww, stride, pad)))
    for arr, grad, idx in ((x, dx, (0, C - 1, H // 2, W - 1)), (wt, dw, (K - 1, 0, R - 1, R // 2))):
        e = np.zeros_like(arr)
        e[idx] = 1e-3
        num = (loss(x + e, wt) - loss(x - e, wt)) / 2e-3 if arr is x else (loss(x, wt + e) - loss(x, wt - e)) / 2e-3
        assert grad[idx] == pytest.approx(num, rel=1e-6, abs=1e-9)


@pytest.mark.parametrize("mode", ["avg", "max"])
def test_pool_backward_reference(mode):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 2, 7, 6))
    dy = rng.standard_normal((2, 2, 3, 3))
    dx = conv_ref.pool_backward_reference(x, dy, 2, mode)
    assert np.all(dx[:, :, 6, :] == 0)  # the cut-off row
    # <dy, pool(x)> is linear in x for avg, and piecewise linear for max: check against differences
    # at the maximum of window (1, 0, 1, 1) (rows 2-3, columns 2-3), where max's gradient is dy
    # itself, and at the element beside it, where it is 0 (so the probe is never 0 against 0 twice).
    rows, cols = np.unravel_index(np.argmax(x[1, 0, 2:4, 2:4]), (2, 2))
    top = (1, 0, 2 + rows, 2 + cols)
    beside = (1, 0, 2 + (1 - rows), 2 + cols)
    f = lambda xx: float(np.sum(dy * conv_ref.pool_reference(xx, 2, mode)))
    for idx in (top, beside):
        e = np.zeros_like(x)
        e[idx] = 1e-6
        assert dx[idx] == pytest.approx((f(x + e) - f(x - e)) / 2e-6, rel=1e-5, abs=1e-9)
    assert dx[top] == pytest.approx(dy[1, 0, 1, 1] if mode == "max" else dy[1, 0, 1, 1] / 4, rel=1e-12)


def test_lenet5_reference_step_is_gradient_descent():
    """The reference's update is -rate times the loss gradient: checked by central differences
    on a weight of each kind (a conv filter, a fully connected weight, a bias)."""
    from nnbench.workloads.conv import lenet
    x, labels = lenet.images(1, 0)
    x, labels = x[:6], labels[:6]
    params = lenet.init_params(1)
    rate = 0.1
    loss, new, logits = lenet.reference_step(params, x, labels, rate)
    assert logits.shape == (6, lenet.CLASSES) and loss == pytest.approx(np.log(lenet.CLASSES), rel=0.05)

    def loss_at(i, which, idx, delta):
        p = [(W.copy(), b.copy()) for W, b in params]
        p[i][which][idx] += delta
        return lenet.reference_step(p, x, labels, 0.0)[0]

    for i, which, idx in ((0, 0, (2, 0, 1, 3)), (2, 0, (7, 5, 2, 2)), (4, 1, (labels[0],))):
        grad = (params[i][which][idx] - new[i][which][idx]) / rate
        num = (loss_at(i, which, idx, 1e-6) - loss_at(i, which, idx, -1e-6)) / 2e-6
        assert grad == pytest.approx(num, rel=1e-4, abs=1e-9), (i, which, idx)


def test_lenet5_layers_must_chain():
    from dataclasses import replace

    from nnbench.workloads.conv import lenet
    lenet.check_chain()
    bad = list(lenet.LAYERS)
    bad[1] = replace(bad[1], C=4)
    with pytest.raises(NnbenchError, match="layer conv2: takes 4 channels, but layer conv1 gives 6"):
        lenet.check_chain(bad)
    bad = list(lenet.LAYERS)
    bad[2] = replace(bad[2], H=6)
    with pytest.raises(NnbenchError, match="layer fc1: takes 6x6 inputs, but layer conv2 gives 5x5"):
        lenet.check_chain(bad)


# -- the conditioned measure and its limits (nnbench/workloads/conv/bounds.py) ----------------------
ODD_LAYERS = [  # N, C, H, W, K, R, stride, pad: a 1x1 image, 1x1 filters, odd sizes, stride 2, padding
    (1, 1, 1, 1, 1, 1, 1, 0), (1, 1, 1, 1, 2, 3, 1, 1), (1, 1, 7, 7, 1, 1, 1, 0), (2, 3, 5, 7, 3, 3, 2, 1),
    (3, 5, 9, 9, 2, 3, 2, 0), (1, 4, 6, 5, 5, 5, 1, 2)]


def _tf32(a: np.ndarray) -> np.ndarray:
    """`a` truncated to TF32's 10 mantissa bits, as a tensor core reads an FP32 register."""
    return (np.asarray(a, np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


def _float32_backward(x, wt, dy, stride, pad, drop_tap=False):
    """dX and dW in float32 arithmetic (im2col, BLAS products, col2im), as a correct FP32 kernel may order them."""
    K, C, R, _ = wt.shape
    w2 = wt.reshape(K, -1)
    if drop_tap:
        w2 = np.where(np.arange(w2.shape[1]) % (R * R) == R * R // 2, np.float32(0), w2)
    u = conv_ref.im2col(x, R, stride, pad)
    d2 = dy.reshape(len(x), K, -1)
    dw = np.tensordot(d2, u, axes=([0, 2], [0, 2])).reshape(wt.shape)
    if drop_tap:
        dw = dw.reshape(K, -1).copy()
        dw[:, R * R // 2::R * R] = 0
        dw = dw.reshape(wt.shape)
    return conv_ref.col2im(np.matmul(w2.T, d2), x.shape, R, stride, pad), dw


@pytest.mark.parametrize("dims", ODD_LAYERS, ids=lambda d: "x".join(map(str, d)))
def test_the_numpy_path_passes_at_every_seed_and_a_dropped_tap_or_tf32_fails(dims):
    """The CPU path's forward, checked as every path is (each output's error against |w|*|x|, within the FP32 limit
    for C*R*S taps), passes over 200 seeds on odd layers; the same path with one filter tap dropped, or with its
    operands rounded to TF32 as if FP32 were TF32, fails at every seed (the centre tap, which every output meets)."""
    from nnbench.runtime.cpu import CpuBackend
    from nnbench.workloads.conv import session as conv
    from nnbench.workloads.conv.launch import Layer
    shape = ConvShape(*dims)
    limit = conv.bounds.forward_limit("FP32 host", shape)
    worst = {"honest": 0.0, "dropped": np.inf, "tf32": np.inf}
    for seed in range(200):
        layer = Layer(CpuBackend(), shape, seed)
        worst["honest"] = max(worst["honest"], conv._numpy({}, layer, limit)["rel_err"])
        dropped = conv._numpy({}, layer, limit, drop_tap=True)
        worst["dropped"] = min(worst["dropped"], dropped["rel_err"])
        assert dropped["status"] == "FAIL"
        y = conv_ref.conv_reference(_tf32(layer.x), _tf32(layer.wt), shape.stride, shape.pad).astype(np.float32)
        worst["tf32"] = min(worst["tf32"], conv.measure.conditioned_error(y, layer.ref, layer.mag))
    assert worst["honest"] <= limit < worst["tf32"] < worst["dropped"], (worst, limit)


@pytest.mark.parametrize("dims", ODD_LAYERS, ids=lambda d: "x".join(map(str, d)))
def test_the_gradients_limits_pass_float32_at_every_seed_and_fail_a_dropped_tap(dims):
    """dX and dW computed in float32, each against its own magnitudes and the limit of its reduction length (K*R*S,
    N*P*Q), pass over 200 seeds; the filters' centre tap dropped from both fails at every seed."""
    from nnbench.workloads.conv import bounds
    shape = ConvShape(*dims)
    lim_dx, lim_dw = bounds.backward_limits("FP32 host", shape)
    honest, dropped = 0.0, np.inf
    for seed in range(200):
        rng = np.random.default_rng(seed)
        x = conv_ref.random_nonzero(rng, (shape.N, shape.C, shape.H, shape.W))
        wt = conv_ref.random_nonzero(rng, (shape.K, shape.C, shape.R, shape.R))
        dy = conv_ref.random_nonzero(rng, (shape.N, shape.K, shape.Ho, shape.Wo))
        refs = conv_ref.conv_backward_reference(x, wt, dy, shape.stride, shape.pad)
        mags = bounds.backward_magnitudes(x, wt, dy, shape.stride, shape.pad)

        def ratio(got):
            return bounds.worst([(conv_measure(g, r, m), lim) for g, r, m, lim in zip(got, refs, mags,
                                                                                       (lim_dx, lim_dw))])
        err, lim = ratio(_float32_backward(x, wt, dy, shape.stride, shape.pad))
        honest = max(honest, err / lim)
        err, lim = ratio(_float32_backward(x, wt, dy, shape.stride, shape.pad, drop_tap=True))
        dropped = min(dropped, err / lim)
    assert honest <= 1 < dropped, (honest, dropped)


def conv_measure(got, ref, mag):
    from nnbench import measure
    return measure.conditioned_error(got, ref, mag)


@pytest.mark.parametrize("mode", ["avg", "max"])
def test_pooling_limits_pass_float32_and_fail_a_wrong_element(mode):
    """Pooling in float32 (sum and scale; the maximum) within bounds.pool_limit over 200 seeds at odd sizes; one
    window's last element left out fails. The maximum is exact, so its limit is one rounding of slack."""
    from nnbench.workloads.conv import bounds
    for seed in range(200):
        rng = np.random.default_rng(seed)
        S = 2 + seed % 2
        x = conv_ref.random_nonzero(rng, (1, 2, 7, 5))
        win = x[:, :, :7 // S * S, :5 // S * S].reshape(1, 2, 7 // S, S, 5 // S, S)
        y = win.max(axis=(3, 5)) if mode == "max" else win.sum(axis=(3, 5), dtype=np.float32) * np.float32(1 / (S * S))
        ref, mag = conv_ref.pool_reference(x, S, mode), bounds.pool_magnitude(x, S, mode)
        assert conv_measure(y, ref, mag) <= bounds.pool_limit(mode, S)
        cut = win.copy()
        cut[0, 0, 0, S - 1, 0, S - 1] = -np.inf if mode == "max" else 0
        bad = cut.max(axis=(3, 5)) if mode == "max" else cut.sum(axis=(3, 5), dtype=np.float32) / (S * S)
        assert conv_measure(bad, ref, mag) > bounds.pool_limit(mode, S) or np.all(bad == y)
