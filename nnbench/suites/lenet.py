"""LeNet-5 end to end (`nnbench conv --model lenet5`): a forward pass and an SGD training step on
32 x 32 images of the project's letter glyphs, on nnbench's kernels, against the float64
reference and the same model in PyTorch.

The model is the seed's LeNet5 (seed 004) without its BatchNorm layers, as LeCun's LeNet-5 has
none: conv 5x5 (1 -> 6), ReLU, max-pool 2; conv 5x5 (6 -> 16), ReLU, max-pool 2; fully connected
400 -> 120 -> 84 -> 52 classes (ReLU between), mean softmax cross-entropy. (The seed's class also
calls `super(ConvNeuralNet, self)`, the wrong name, which would raise in Python.) The fully
connected layers run as convolutions whose filter covers the whole input (fc1: a 5x5 filter over
16 x 5 x 5, to a 1 x 1 output; fc2 and fc3: 1 x 1), so every layer is the unroll path of
kernels_cu/conv/04 and 06; bias, ReLU, softmax and SGD are kernels_cu/conv/08_lenet.cu.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nnbench import glyphs, measure, registry
from nnbench.errors import KernelFault, NnbenchError
from nnbench.runtime.compile import compile_sources
from nnbench.suites import conv

CLASSES = len(glyphs.LETTERS)
ALIGN = 64  # floats: each weight and bias array starts on a 256-byte boundary of the model's one buffer


@dataclass(frozen=True)
class Layer:
    name: str
    C: int
    K: int
    R: int
    H: int  # input height = width
    relu: bool
    pool: int  # 0: none, else the max-pool window

    def shape(self, batch: int) -> conv.ConvShape:
        return conv.ConvShape(batch, self.C, self.H, self.H, self.K, self.R)


LAYERS = (
    Layer("conv1", 1, 6, 5, 32, True, 2),
    Layer("conv2", 6, 16, 5, 14, True, 2),
    Layer("fc1", 16, 120, 5, 5, True, 0),
    Layer("fc2", 120, 84, 1, 1, True, 0),
    Layer("fc3", 84, CLASSES, 1, 1, False, 0),
)


def check_chain(layers=LAYERS, image: int = 32) -> None:
    """Each layer must take what the one before gives: its channels and its input size. A model
    whose layers do not chain is refused with the first mismatch named."""
    channels, size, prev = 1, image, "the input"
    for lay in layers:
        if lay.C != channels:
            raise NnbenchError(f"layer {lay.name}: takes {lay.C} channels, but {prev} gives {channels}")
        if lay.H != size:
            raise NnbenchError(f"layer {lay.name}: takes {lay.H}x{lay.H} inputs, but {prev} gives {size}x{size}")
        if lay.R > lay.H:
            raise NnbenchError(f"layer {lay.name}: a {lay.R}x{lay.R} filter is larger than its {lay.H}x{lay.H} input")
        size = lay.H - lay.R + 1
        size = size // lay.pool if lay.pool else size
        channels, prev = lay.K, f"layer {lay.name}"
    if channels != CLASSES or size != 1:
        raise NnbenchError(f"{prev} gives {channels} channels of {size}x{size}; the classifier needs {CLASSES} of 1x1")


def images(per_letter: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(N, 1, 32, 32) float32 images of noisy letters (glyphs.noisy, 10 x 12, upscaled 2x by
    repetition and centred) and their class numbers (the letter's index)."""
    d = glyphs.noisy(120, per_letter, seed=seed)
    small = d.x.reshape(-1, 12, 10)
    big = small.repeat(2, axis=1).repeat(2, axis=2)  # 24 x 20
    x = np.zeros((len(d), 1, 32, 32), np.float32)
    x[:, 0, 4:28, 6:26] = big
    labels = np.array([glyphs.LETTERS.index(c) for c in d.letters], np.int32)
    return x, labels


def init_params(seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(W, b) per layer, W (K, C, R, R): PyTorch's default (Kaiming-uniform, a = sqrt 5) bounds."""
    rng = np.random.default_rng(seed)
    out = []
    for lay in LAYERS:
        bound = 1.0 / np.sqrt(lay.C * lay.R * lay.R)
        out.append((rng.uniform(-bound, bound, (lay.K, lay.C, lay.R, lay.R)), rng.uniform(-bound, bound, lay.K)))
    return out


# -- the float64 reference ------------------------------------------------------------------------
def reference_step(params, x: np.ndarray, labels: np.ndarray, rate: float):
    """One SGD step in float64: returns (loss before the step, updated params, logits)."""
    acts, pre = [x.astype(np.float64)], []
    a = acts[0]
    for (W, b), lay in zip(params, LAYERS):
        z = conv.conv_reference(a, W, 1, 0) + b[None, :, None, None]
        z = np.maximum(z, 0) if lay.relu else z
        pre.append(z)
        a = conv.pool_reference(z, lay.pool, "max") if lay.pool else z
        acts.append(a)
    logits = a.reshape(len(x), CLASSES)
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    loss = float(-np.mean(np.log(p[np.arange(len(x)), labels])))
    d = p.copy()
    d[np.arange(len(x)), labels] -= 1.0
    d = (d / len(x)).reshape(a.shape)
    new = []
    for i in range(len(LAYERS) - 1, -1, -1):
        lay, (W, b) = LAYERS[i], params[i]
        if lay.pool:
            d = conv.pool_backward_reference(pre[i], d, lay.pool, "max")
        if lay.relu:
            d = d * (pre[i] > 0)
        dx, dw = conv.conv_backward_reference(acts[i], W, d, 1, 0)
        new.append((W - rate * dw, b - rate * d.sum(axis=(0, 2, 3))))
        d = dx
    return loss, new[::-1], logits


# -- on the GPU -----------------------------------------------------------------------------------
def _block_grid(backend, total: int):
    return (256, 1, 1), (backend.device.stride_blocks(total), 1, 1)


class GpuLeNet:
    """LeNet-5's state for one batch on the GPU, and its forward pass and training step as lists
    of launches (no host synchronization inside either)."""

    def __init__(self, backend, params, x: np.ndarray, labels: np.ndarray, rate: float) -> None:
        be, self.be = backend, backend
        n = self.batch = len(x)
        fwd_v, bwd_v = registry.get("conv", "unroll"), registry.get("conv-backward", "unroll-backward")
        pool_v, g = registry.get("pool", "max"), registry.get("gemm", "tf32x3")
        fwd, bwd, pool, ew, gemm = compile_sources(be.arch, [
            (fwd_v.source, {}), (bwd_v.source, bwd_v.defaults()), (pool_v.source, pool_v.defaults()),
            ("conv/08_lenet.cu", {}), (g.source, g.defaults())])
        k = {name: be.load(ew, name).func for name in ("bias_act", "relu_grad", "bias_grad", "softmax_xent", "sgd")}
        pf, pb = be.load(pool, "pool_forward").func, be.load(pool, "pool_backward").func
        f32 = lambda a: be.upload(np.ascontiguousarray(a, dtype=np.float32))
        zeros = lambda count: be.upload(np.zeros(count, np.float32))
        ip = lambda b: np.intp(int(b))
        self.X, self.labels = f32(x), be.upload(labels.astype(np.int32))
        # Every weight and bias in one buffer and every gradient in another, at the same offsets, so
        # that one SGD launch updates the whole model; the zero padding between them stays zero.
        arrays = [a for W, b in params for a in (W, b)]
        offsets = np.concatenate([[0], np.cumsum([-(-a.size // ALIGN) * ALIGN for a in arrays])])
        flat = np.zeros(int(offsets[-1]), np.float32)
        for a, off in zip(arrays, offsets):
            flat[off:off + a.size] = a.ravel()
        self.params_flat, self.grads_flat, self.size = be.upload(flat), zeros(flat.size), flat.size
        at = lambda buf, i: int(buf) + 4 * int(offsets[i])
        self.W, self.b = [at(self.params_flat, 2 * i) for i in range(len(params))], \
            [at(self.params_flat, 2 * i + 1) for i in range(len(params))]
        self.dW, self.db = [at(self.grads_flat, 2 * i) for i in range(len(params))], \
            [at(self.grads_flat, 2 * i + 1) for i in range(len(params))]
        self.loss = zeros(1)
        self.keep = []  # workspaces the launchers point into
        shapes = [lay.shape(n) for lay in LAYERS]
        Z = [zeros(s.N * s.K * s.Ho * s.Wo) for s in shapes]  # each conv's activated output
        P = [zeros(s.N * s.K * (s.Ho // lay.pool) ** 2) if lay.pool else None for s, lay in zip(shapes, LAYERS)]
        out = [P[i] if LAYERS[i].pool else Z[i] for i in range(len(LAYERS))]  # each layer's output
        dZ = [zeros(s.N * s.K * s.Ho * s.Wo) for s in shapes]
        d_out = [zeros(s.N * s.K * (s.Ho // lay.pool) ** 2) if lay.pool else dZ[i]
                 for i, (s, lay) in enumerate(zip(shapes, LAYERS))]
        self.Z, self.logits = Z, Z[-1]
        fwd_runs, bwd_runs = [], []
        for i, (s, lay) in enumerate(zip(shapes, LAYERS)):
            a_in = self.X if i == 0 else out[i - 1]
            run, U, Zw = conv.unroll_forward(be, fwd, gemm, s, a_in, self.W[i], Z[i])
            self.keep += [U, Zw]  # U, the unrolled input, serves the backward's filter gradient too
            count = s.N * s.K * s.Ho * s.Wo
            blk, grd = _block_grid(be, count)
            steps = [run, self._call(k["bias_act"], blk, grd, ip(Z[i]), ip(self.b[i]), np.int32(s.N),
                                     np.int32(s.K), np.int32(s.Ho * s.Wo), np.int32(lay.relu))]
            if lay.pool:
                blk, grd = _block_grid(be, count // lay.pool ** 2)
                steps.append(self._call(pf, blk, grd, np.int32(s.N), np.int32(s.K), np.int32(s.Ho), np.int32(s.Wo),
                                        np.int32(lay.pool), ip(Z[i]), ip(P[i])))
            fwd_runs += steps
            # backward of layer i: d_out[i] -> dZ[i] -> (dW, db, d_out[i-1])
            back = []
            if lay.pool:
                blk, grd = _block_grid(be, count // lay.pool ** 2)
                back.append(self._call(pb, blk, grd, np.int32(s.N), np.int32(s.K), np.int32(s.Ho), np.int32(s.Wo),
                                       np.int32(lay.pool), ip(Z[i]), ip(d_out[i]), ip(dZ[i])))
            if lay.relu:
                blk, grd = _block_grid(be, count)
                back.append(self._call(k["relu_grad"], blk, grd, ip(dZ[i]), ip(Z[i]), np.int64(count)))
            back.append(self._call(k["bias_grad"], (256, 1, 1), (s.K, 1, 1), ip(dZ[i]), ip(self.db[i]),
                                   np.int32(s.N), np.int32(s.K), np.int32(s.Ho * s.Wo)))
            # The first layer's input is the images: no gradient is taken for it.
            run_b, work = conv.unroll_backward(be, bwd_v, bwd_v.defaults(), bwd, fwd, s, a_in, self.W[i], dZ[i],
                                               None if i == 0 else d_out[i - 1], self.dW[i], U=U)
            self.keep += list(work.values())
            back.append(run_b)
            bwd_runs.insert(0, back)
        blk, grd = _block_grid(be, n)
        xent = self._call(k["softmax_xent"], blk, grd, ip(Z[-1]), ip(self.labels), ip(dZ[-1]), ip(self.loss),
                          np.int32(n), np.int32(CLASSES))
        blk, grd = _block_grid(be, self.size)
        updates = [self._call(k["sgd"], blk, grd, ip(self.params_flat), ip(self.grads_flat), np.int32(self.size),
                              np.float32(rate))]
        self.forward_launches = fwd_runs
        self.step_launches = fwd_runs + [xent] + [r for back in bwd_runs for r in back] + updates  # last layer first

    @staticmethod
    def _call(func, block, grid, *args):
        return lambda: func(*args, block=block, grid=grid)

    @staticmethod
    def callable(launches):
        def run():
            for f in launches:
                f()
        return run

    def params(self) -> list[tuple[np.ndarray, np.ndarray]]:
        return [(self.be.download(W, np.zeros(lay.K * lay.C * lay.R * lay.R, np.float32)).reshape(
                    lay.K, lay.C, lay.R, lay.R).astype(np.float64),
                 self.be.download(b, np.zeros(lay.K, np.float32)).astype(np.float64))
                for W, b, lay in zip(self.W, self.b, LAYERS)]


def first_step_error(net: GpuLeNet, step, params, ref_loss: float, ref_params) -> float:
    """One training step (`step`: the net's launches, or their graph) from the initial weights, logits
    poisoned first: the larger of its weight changes' error against float64 (mlp.weight_change_error
    over weights and biases) and its loss's relative error."""
    from nnbench.suites import mlp
    be = net.be
    be.fill_nan(net.logits, net.batch * CLASSES)
    be.write(net.loss, np.zeros(1, np.float32))
    step()
    loss = float(be.download(net.loss, np.zeros(1, np.float32))[0])
    init = [W for W, _ in params] + [b for _, b in params]
    got = net.params()
    err = mlp.weight_change_error([W for W, _ in got] + [b for _, b in got],
                                  [W for W, _ in ref_params] + [b for _, b in ref_params], init)
    return max(err, abs(loss - ref_loss) / abs(ref_loss))


# -- PyTorch --------------------------------------------------------------------------------------
def torch_model(params):
    """The same model in PyTorch (Conv2d, MaxPool2d, Linear), from the same weights."""
    import torch
    import torch.nn as nn

    class LeNet5(nn.Module):
        def __init__(self):
            super().__init__()  # the seed writes super(ConvNeuralNet, self): the wrong class
            self.c1, self.c2 = nn.Conv2d(1, 6, 5), nn.Conv2d(6, 16, 5)
            self.f1, self.f2, self.f3 = nn.Linear(400, 120), nn.Linear(120, 84), nn.Linear(84, CLASSES)
            self.pool = nn.MaxPool2d(2, 2)

        def forward(self, x):
            x = self.pool(torch.relu(self.c1(x)))
            x = self.pool(torch.relu(self.c2(x)))
            x = torch.relu(self.f1(x.reshape(len(x), -1)))
            return self.f3(torch.relu(self.f2(x)))

    m = LeNet5().cuda()
    with torch.no_grad():
        for mod, (W, b) in zip((m.c1, m.c2, m.f1, m.f2, m.f3), params):
            mod.weight.copy_(torch.tensor(W.reshape(mod.weight.shape), dtype=torch.float32))
            mod.bias.copy_(torch.tensor(b, dtype=torch.float32))
    return m


ISSUED_REPS = 50  # steps back to back as the host issues them, for ours and PyTorch alike


def host_issued_ms(backend, fn) -> float:
    """Milliseconds per call of `fn` (after 3 warm-up calls) over ISSUED_REPS calls issued back to
    back from Python between two CUDA events on the default stream, where PyTorch's eager kernels
    run too: launch gaps included, as a training loop sees them."""
    for _ in range(3):
        fn()
    return backend.timed(fn, ISSUED_REPS)


def torch_step_check(params, x, labels, rate: float, ref_params) -> tuple[float, float]:
    """PyTorch's first loss and its weight changes after one SGD step from the same weights, against
    float64 (the same measure as ours: mlp.weight_change_error over weights and biases): (loss, error)."""
    import torch

    from nnbench.suites import mlp
    m = torch_model(params)
    X = torch.tensor(x, device="cuda")
    T = torch.tensor(labels, dtype=torch.long, device="cuda")
    opt = torch.optim.SGD(m.parameters(), lr=rate)
    opt.zero_grad(set_to_none=False)
    loss = torch.nn.CrossEntropyLoss()(m(X), T)
    loss.backward()
    opt.step()
    got = [(mod.weight.detach().double().cpu().numpy().reshape(W.shape), mod.bias.detach().double().cpu().numpy())
           for mod, (W, _) in zip((m.c1, m.c2, m.f1, m.f2, m.f3), params)]
    init = [W for W, _ in params] + [b for _, b in params]
    err = mlp.weight_change_error([W for W, _ in got] + [b for _, b in got],
                                  [W for W, _ in ref_params] + [b for _, b in ref_params], init)
    return float(loss), err


def torch_times(backend, params, x, labels, rate: float) -> dict:
    import torch
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    m = torch_model(params)
    X = torch.tensor(x, device="cuda")
    T = torch.tensor(labels, dtype=torch.long, device="cuda")
    opt = torch.optim.SGD(m.parameters(), lr=rate)
    lossf = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=False)
        loss = lossf(m(X), T)
        loss.backward()
        opt.step()
        return loss

    with torch.no_grad():
        fwd_ms = host_issued_ms(backend, lambda: m(X))
        first = float(lossf(m(X), T))
    step_ms = host_issued_ms(backend, step)
    return dict(forward_ms=fwd_ms, step_ms=step_ms, loss=first)


# -- the command's whole job ----------------------------------------------------------------------
STEP_RTOL = 2e-3  # float32 against float64, on the weight changes of one SGD step (as the MLP check)


def run(backend, batch: int, rate: float = 0.05, seed: int = 0, settings=measure.TimingSettings(),
        with_torch: bool = True, env: dict | None = None):
    """Yield the records: ours (checked against float64 on one step), then PyTorch."""
    if batch < 1:
        raise NnbenchError(f"--n {batch}: the batch must be >= 1")
    per_letter = -(-batch // CLASSES)
    x, labels = images(per_letter, seed)
    x, labels = x[:batch], labels[:batch]
    params = init_params(seed)
    base = dict(suite="conv", shape=f"LeNet-5, batch {batch}", N=batch, C=1, H=32, W=32, K=CLASSES, R=5, stride=1,
                pad=0, seed=seed, **(env or {}))
    check_chain()
    ref_loss, ref_params, _ = reference_step(params, x, labels, rate)
    net = GpuLeNet(backend, params, x, labels, rate)
    err = first_step_error(net, net.callable(net.step_launches), params, ref_loss, ref_params)
    fwd = measure.measure(backend, net.callable(net.forward_launches), settings)
    step = measure.measure(backend, net.callable(net.step_launches), settings)
    issued_ms = host_issued_ms(backend, net.callable(net.step_launches))
    rec = dict(base, variant="lenet5-step", step=4, params=f"unroll path, SGD rate {rate}",
               median_ms=step.median_ms, iqr_ms=step.iqr_ms, samples=step.samples, rel_err=err, rtol=STEP_RTOL,
               status="PASS" if err <= STEP_RTOL else "FAIL", timing=step.timing,
               launches_per_step=len(net.step_launches))
    yield dict(base, variant="lenet5-forward", step=4, params="unroll path", median_ms=fwd.median_ms,
               iqr_ms=fwd.iqr_ms, samples=fwd.samples, status=rec["status"], rel_err=err, rtol=STEP_RTOL,
               timing=fwd.timing)
    yield rec
    yield dict(rec, variant="lenet5-step-issued", params=rec["params"] + ", host-issued (launch gaps included)",
               median_ms=issued_ms, iqr_ms=None, samples=ISSUED_REPS, timing=None)  # params say how
    if hasattr(backend, "capture"):  # the same step as one CUDA graph, on a fresh copy of the model, checked alike
        gnet = GpuLeNet(backend, params, x, labels, rate)
        try:
            graph = backend.capture(gnet.callable(gnet.step_launches))
            gerr = first_step_error(gnet, graph, params, ref_loss, ref_params)
            gstep = measure.measure(backend, graph, settings)
        except KernelFault as e:
            yield dict(base, variant="lenet5-step-graph", step=4, status="ERROR", error=f"kernel fault: {e}")
        else:
            grec = dict(rec, variant="lenet5-step-graph", params=rec["params"] + f", one CUDA graph of "
                        f"{graph.nodes} kernels", median_ms=gstep.median_ms, iqr_ms=gstep.iqr_ms,
                        samples=gstep.samples, rel_err=gerr, status="PASS" if gerr <= STEP_RTOL else "FAIL",
                        timing=gstep.timing)
            yield grec
            yield dict(grec, variant="lenet5-step-graph-issued", params=grec["params"] + ", host-issued",
                       median_ms=host_issued_ms(backend, graph), iqr_ms=None, samples=ISSUED_REPS, timing=None)
    if not with_torch:
        return
    try:
        t = torch_times(backend, params, x, labels, rate)
        t_loss, t_err = torch_step_check(params, x, labels, rate, ref_params)
    except ImportError:
        yield dict(base, variant="torch", status="SKIP", error="PyTorch is not installed")
        return
    # PyTorch's step checked as ours is: its weight changes after one step, and its loss (the larger).
    terr = max(t_err, abs(t_loss - ref_loss) / abs(ref_loss))
    yield dict(base, variant="torch-forward", step="", params="eager, cuDNN, TF32 off", median_ms=t["forward_ms"],
               status="PASS" if terr <= STEP_RTOL else "FAIL", rel_err=terr)
    yield dict(base, variant="torch-step", step="", params="eager, cuDNN, TF32 off, SGD", median_ms=t["step_ms"],
               status="PASS" if terr <= STEP_RTOL else "FAIL", rel_err=terr)
