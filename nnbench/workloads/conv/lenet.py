"""LeNet-5 end to end (`nnbench conv --model lenet5`): a forward pass and an SGD training step on
32 x 32 images of the project's letter glyphs, on nnbench's kernels, against the float64
reference and the same model in PyTorch.

The model is the seed's LeNet5 (seed 004) without its BatchNorm layers, as LeCun's LeNet-5 has
none: conv 5x5 (1 -> 6), ReLU, max-pool 2; conv 5x5 (6 -> 16), ReLU, max-pool 2; fully connected
400 -> 120 -> 84 -> 52 classes (ReLU between), mean softmax cross-entropy. (The seed's class also
calls `super(ConvNeuralNet, self)`, the wrong name, which would raise in Python.) The fully
connected layers run as convolutions whose filter covers the whole input (fc1: a 5x5 filter over
16 x 5 x 5, to a 1 x 1 output; fc2 and fc3: 1 x 1); bias, ReLU, softmax and SGD are
kernels_cu/conv/08_lenet.cu, pooling kernels_cu/conv/05_pool.cu.

Two paths for the convolutions (PATHS), both built and checked in one run:
  unroll    every layer on the unroll path (kernels_cu/conv/04 and 06 + GEMM step 8): the seed's
            teaching step, kept as it was;
  implicit  conv1 and conv2 as implicit GEMMs on GEMM step 9's mainloop (conv steps 9 and 10, wgmma,
            no im2col workspace): forward, data gradient (none for conv1, whose input is the images) and
            filter gradient; the max-pools read the implicit forward's NCHW output as it lands. The
            fully connected layers stay on FC_PATH (its comment says why).
The small layers meet the wgmma tiles by zero-fill, not by padded copies: the kernels gather with
cp.async that zero-fills every k past C*R*R, every output map past K and every row past the GEMM's M,
so no padded tensor is ever written. `padding` counts what those zeros cost in tensor-core work.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nnbench import audit, glyphs, measure, registry
from nnbench.errors import CompileError, KernelFault, NnbenchError
from nnbench.runtime.compile import compile_sources
from nnbench.runtime.device import FFMA, TF32X3
from nnbench.workloads.conv import launch, problem, reference
from nnbench.workloads.conv.variants import VARIANTS

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

    def shape(self, batch: int) -> problem.ConvShape:
        return problem.ConvShape(batch, self.C, self.H, self.H, self.K, self.R)

    @property
    def fully_connected(self) -> bool:
        """The filter covers the whole input: one output pixel, a matrix product written as a convolution."""
        return self.R == self.H


LAYERS = (
    Layer("conv1", 1, 6, 5, 32, True, 2),
    Layer("conv2", 6, 16, 5, 14, True, 2),
    Layer("fc1", 16, 120, 5, 5, True, 0),
    Layer("fc2", 120, 84, 1, 1, True, 0),
    Layer("fc3", 84, CLASSES, 1, 1, False, 0),
)

# The fully connected layers' path on the implicit variant. They are matrix products, not convolutions
# (issue 28 asks for the convolutions on the implicit path), so they take the faster path, measured on the
# H100 (lab/journal/conv.md, "LeNet-5 on the implicit path"): fc1 on the unroll path took 41.8 us forward
# and 36.9 us backward, its shape alone on the implicit kernels 26.7 and 62.6 us. As implicit GEMMs these
# shapes waste most of each tile (`padding`): fc1's data gradient gathers 25 taps of a 1 x 1 dY of which one
# is inside, and the filter gradients pad each image's one pixel to a whole BK = 32 k-block. (With fc1-3 on
# the implicit kernels inside the step, fc1's data gradient faulted, though its shape passes alone:
# lab/journal/lenet-fc-implicit.md.)
FC_PATH = "unroll"
# path name -> (the convolutions' path, the fully connected layers' path)
PATHS = {"unroll": ("unroll", "unroll"), "implicit": ("implicit", FC_PATH)}
DEFAULT_PATHS = ("unroll", "implicit")
VARIANT_PATHS = {"lenet5": "unroll", "lenet5-implicit": "implicit"}  # registry's conv-model variants -> PATHS


def layer_paths(path: str) -> list[str]:
    """Each layer's path ("unroll" or "implicit") under one of PATHS."""
    if path not in PATHS:
        raise NnbenchError(f"LeNet-5 path {path!r}: unknown; choose from {', '.join(PATHS)}")
    convs, fcs = PATHS[path]
    return [fcs if lay.fully_connected else convs for lay in LAYERS]


def padding(batch: int, params: dict | None = None) -> list[dict]:
    """What the implicit path's tiles cost the small layers: per layer and pass, the GEMM's shape (M x N x
    K), the multiply-adds the convolution needs (N*Ho*Wo*K*C*R*R, the same for all three passes) and those
    the tensor cores issue over whole BM x BN x BK tiles, the gathers' zero-fill included (x3 for 3xTF32 on
    both alike). The filter gradient's K runs image by image, each image's Ho*Wo pixels padded to whole
    k-blocks (10_*'s blocks_per_image); the data gradient gathers every one of the R*R taps of dY for
    each input pixel, inside dY or not."""
    from nnbench import registry
    p = params or registry.find(VARIANTS, "conv", "implicit-wgmma").defaults()
    bm, bn, bk = p["BM"], p["BN"], p["BK"]
    up = lambda n, m: -(-n // m) * m  # noqa: E731
    out = []
    for lay in LAYERS:
        s = lay.shape(batch)
        crr, m, hw = s.C * s.R * s.R, s.N * s.Ho * s.Wo, s.Ho * s.Wo
        needed = m * s.K * crr
        passes = {
            "forward": (m, s.K, crr, up(m, bm) * up(s.K, bn) * up(crr, bk)),
            "filter gradient": (crr, s.K, m, up(crr, bm) * up(s.K, bn) * s.N * up(hw, bk)),
            "data gradient": (s.N * s.H * s.W, s.C, s.K * s.R * s.R,
                              up(s.N * s.H * s.W, bm) * up(s.C, bn) * up(s.K * s.R * s.R, bk)),
        }
        for name, (gm, gn, gk, issued) in passes.items():
            out.append(dict(layer=lay.name, gemm_pass=name, M=gm, N=gn, K=gk, needed=needed, issued=issued,
                            waste=issued / needed))
    return out


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
def _sgd_step(params, x: np.ndarray, labels: np.ndarray, rate: float, layer_conv, dtype):
    """One SGD step of the model in `dtype`, each layer's convolution given by `layer_conv(i, a, W)` ->
    (z, back), back(a, d) -> (data gradient, filter gradient): returns (loss before the step, updated
    params, logits). The float64 reference and the CPU model of each path differ only in those two."""
    acts, pre, backs = [x.astype(dtype)], [], []
    a = acts[0]
    for i, ((W, b), lay) in enumerate(zip(params, LAYERS)):
        z, back = layer_conv(i, a, W)
        backs.append(back)
        z = z + b.astype(dtype)[None, :, None, None]
        z = np.maximum(z, 0) if lay.relu else z
        pre.append(z)
        a = reference.pool_reference(z, lay.pool, "max").astype(dtype) if lay.pool else z
        acts.append(a)
    logits = a.reshape(len(x), CLASSES)
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    loss = float(-np.mean(np.log(p[np.arange(len(x)), labels])))
    d = p.copy()
    d[np.arange(len(x)), labels] -= 1.0
    d = (d / len(x)).reshape(a.shape).astype(dtype)
    new = []
    for i in range(len(LAYERS) - 1, -1, -1):
        lay, (W, b) = LAYERS[i], params[i]
        if lay.pool:
            d = reference.pool_backward_reference(pre[i], d, lay.pool, "max").astype(dtype)
        if lay.relu:
            d = d * (pre[i] > 0)
        dx, dw = backs[i](acts[i], d)
        new.append((W - rate * dw, b - rate * d.sum(axis=(0, 2, 3))))
        d = dx
    return loss, new[::-1], logits


def reference_step(params, x: np.ndarray, labels: np.ndarray, rate: float):
    """One SGD step in float64: returns (loss before the step, updated params, logits)."""
    def layer_conv(i, a, W):
        return (reference.conv_reference(a, W, 1, 0),
                lambda a_, d: reference.conv_backward_reference(a_, W, d, 1, 0))
    return _sgd_step(params, x, labels, rate, layer_conv, np.float64)


# -- on the CPU, as the paths compute it -------------------------------------------------------------
def _unroll_cpu(x: np.ndarray, wt: np.ndarray):
    """The unroll path's arithmetic in float32 (im2col, then one product): (forward, data grad, filter grad)."""
    K, C, R, _ = wt.shape
    w2 = wt.reshape(K, -1)

    def fwd(a):
        u = reference.im2col(a, R, 1, 0)
        return np.matmul(w2, u).reshape(len(a), K, a.shape[2] - R + 1, -1)

    def back(a, d):
        u, d2 = reference.im2col(a, R, 1, 0), d.reshape(len(a), K, -1)
        dw = np.tensordot(d2, u, axes=([0, 2], [0, 2])).reshape(wt.shape).astype(np.float32)
        return reference.col2im(np.matmul(w2.T, d2), a.shape, R, 1, 0).astype(np.float32), dw
    return fwd(x), back


def cpu_step(params, x: np.ndarray, labels: np.ndarray, rate: float, path: str = "implicit",
             drop_tap: bool = False):
    """One SGD step in float32 on the CPU with each layer's convolutions computed as `path` computes them:
    the implicit layers by nnbench/workloads/conv/implicit_numpy.py (the kernels' gathers, tiles and zero-fill;
    `drop_tap`: their last filter tap never gathered, as tests/mutants.py patches the kernels), the others by
    im2col and a product. Returns (loss, updated params), for the same check as the GPU's step (`cpu_step_error`)."""
    from nnbench.workloads.conv import implicit_numpy as imp
    f32 = np.float32
    kinds = layer_paths(path)

    def layer_conv(i, a, W):
        W = W.astype(f32)
        if kinds[i] == "implicit":
            return imp.forward(a, W, drop_tap=drop_tap), lambda a_, d: (
                imp.data_grad(d, W, a_.shape, drop_tap=drop_tap), imp.filter_grad(a_, d, W.shape[2], drop_tap=drop_tap))
        return _unroll_cpu(a, W)
    loss, new, _ = _sgd_step(params, x, labels, rate, layer_conv, f32)
    return loss, new


def cpu_step_error(params, got_loss: float, got_params, ref_loss: float, ref_params) -> float:
    """The one-step check's error: the larger of the weight changes' error against float64
    (measure.weight_change_error over weights and biases) and the loss's relative error."""
    init = [W for W, _ in params] + [b for _, b in params]
    err = measure.weight_change_error([W for W, _ in got_params] + [b for _, b in got_params],
                                  [W for W, _ in ref_params] + [b for _, b in ref_params], init)
    return max(err, abs(got_loss - ref_loss) / abs(ref_loss))


# -- on the GPU -----------------------------------------------------------------------------------
def _block_grid(backend, total: int):
    return (256, 1, 1), (backend.device.stride_blocks(total), 1, 1)


class GpuLeNet:
    """LeNet-5's state for one batch on the GPU, and its forward pass and training step as lists
    of launches (no host synchronization inside either), each launch under a stage name (`stages`:
    (name, launcher) in step order) for the per-stage split. `path`: one of PATHS; `defines`: -D
    macros added to the implicit path's builds (the tests' planted defects)."""

    def __init__(self, backend, params, x: np.ndarray, labels: np.ndarray, rate: float, path: str = "unroll",
                 defines: dict[str, int] | None = None) -> None:
        be, self.be = backend, backend
        n = self.batch = len(x)
        self.path, self.paths = path, layer_paths(path)
        fwd_v = registry.find(VARIANTS, "conv", "unroll")
        bwd_v = registry.find(VARIANTS, "conv", "unroll-backward")
        pool_v, g = registry.find(VARIANTS, "conv", "max"), registry.TF32X3_GEMM
        fwd, bwd, pool, ew, gemm = compile_sources(be.arch, [
            (fwd_v.source, {}), (bwd_v.source, bwd_v.defaults()), (pool_v.source, pool_v.defaults()),
            ("conv/08_lenet.cu", {}), (g.source, g.defaults())])
        if "implicit" in self.paths:  # conv steps 9 and 10 at the registry's defaults, built for sm_90a
            ifwd_v, ibwd_v = registry.find(VARIANTS, "conv", "implicit-wgmma"), registry.find(VARIANTS, "conv",
                                                                                  "implicit-wgmma-backward")
            if why := ifwd_v.arch_problem(be.device):
                raise NnbenchError(f"LeNet-5 path {path}: {why}")
            ifp, ibp = dict(ifwd_v.defaults(), **(defines or {})), dict(ibwd_v.defaults(), **(defines or {}))
            ifwd, ibwd = compile_sources(ifwd_v.target(be.arch), [(ifwd_v.source, ifp), (ibwd_v.source, ibp)])
            for c in (ifwd, ibwd):
                if isinstance(c, Exception):
                    raise c
        k = {name: be.load(ew, name) for name in ("bias_act", "relu_grad", "bias_grad", "softmax_xent", "sgd")}
        pf, pb = be.load(pool, "pool_forward"), be.load(pool, "pool_backward")
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
        self.notes = []  # per implicit layer: the launch's path (tensor maps, split-K)
        shapes = [lay.shape(n) for lay in LAYERS]
        Z = [zeros(s.N * s.K * s.Ho * s.Wo) for s in shapes]  # each conv's activated output
        P = [zeros(s.N * s.K * (s.Ho // lay.pool) ** 2) if lay.pool else None for s, lay in zip(shapes, LAYERS)]
        out = [P[i] if LAYERS[i].pool else Z[i] for i in range(len(LAYERS))]  # each layer's output
        dZ = [zeros(s.N * s.K * s.Ho * s.Wo) for s in shapes]
        d_out = [zeros(s.N * s.K * (s.Ho // lay.pool) ** 2) if lay.pool else dZ[i]
                 for i, (s, lay) in enumerate(zip(shapes, LAYERS))]
        self.Z, self.logits = Z, Z[-1]
        # The launchers hold these buffers' addresses only: the net holds the buffers. (Before, P, dZ and the
        # pooled gradients were freed when __init__ returned and the step wrote into memory given back to the
        # driver; on the implicit path at batch 256 and 1,024 that was an illegal-address fault.)
        self.buffers = (Z, P, dZ, d_out)
        fwd_runs, bwd_runs = [], []
        for i, (s, lay) in enumerate(zip(shapes, LAYERS)):
            a_in = self.X if i == 0 else out[i - 1]
            d_in = None if i == 0 else d_out[i - 1]  # the first layer's input is the images: no gradient
            if self.paths[i] == "implicit":
                run, text = launch.implicit_forward(be, ifwd_v, ifp, ifwd, s, a_in, self.W[i], Z[i])
                run_b, text_b = launch.implicit_backward(be, ibwd_v, ibp, ibwd, s, a_in, self.W[i], dZ[i], d_in,
                                                       self.dW[i])
                self.notes.append(f"{lay.name}: forward {text}; backward {text_b}")
            else:
                run, U, Zw = launch.unroll_forward(be, fwd, gemm, s, a_in, self.W[i], Z[i])
                self.keep += [U, Zw]  # U, the unrolled input, serves the backward's filter gradient too
                run_b, work = launch.unroll_backward(be, bwd_v, bwd_v.defaults(), bwd, fwd, s, a_in, self.W[i], dZ[i],
                                                   d_in, self.dW[i], U=U)
                self.keep += list(work.values())
            count = s.N * s.K * s.Ho * s.Wo
            blk, grd = _block_grid(be, count)
            steps = [(f"{lay.name} {self.paths[i]} forward", run),
                     (f"{lay.name} bias+act", be.bind(k["bias_act"], grd, blk, (ip(Z[i]), ip(self.b[i]), np.int32(s.N),
                                                                                np.int32(s.K), np.int32(s.Ho * s.Wo),
                                                                                np.int32(lay.relu))))]
            if lay.pool:
                blk, grd = _block_grid(be, count // lay.pool ** 2)
                steps.append((f"{lay.name} max-pool", be.bind(pf, grd, blk, (np.int32(s.N), np.int32(s.K),
                                                                              np.int32(s.Ho), np.int32(s.Wo),
                                                                              np.int32(lay.pool), ip(Z[i]), ip(P[i])))))
            fwd_runs += steps
            # backward of layer i: d_out[i] -> dZ[i] -> (dW, db, d_out[i-1])
            back = []
            if lay.pool:
                blk, grd = _block_grid(be, count // lay.pool ** 2)
                back.append((f"{lay.name} max-pool backward", be.bind(
                    pb, grd, blk, (np.int32(s.N), np.int32(s.K), np.int32(s.Ho), np.int32(s.Wo), np.int32(lay.pool),
                                   ip(Z[i]), ip(d_out[i]), ip(dZ[i])))))
            if lay.relu:
                blk, grd = _block_grid(be, count)
                back.append((f"{lay.name} relu backward", be.bind(k["relu_grad"], grd, blk,
                                                                  (ip(dZ[i]), ip(Z[i]), np.int64(count)))))
            back.append((f"{lay.name} bias gradient", be.bind(k["bias_grad"], (s.K, 1, 1), (256, 1, 1),
                                                              (ip(dZ[i]), ip(self.db[i]), np.int32(s.N),
                                                               np.int32(s.K), np.int32(s.Ho * s.Wo)))))
            back.append((f"{lay.name} {self.paths[i]} backward", run_b))
            bwd_runs.insert(0, back)
        blk, grd = _block_grid(be, n)
        xent = be.bind(k["softmax_xent"], grd, blk, (ip(Z[-1]), ip(self.labels), ip(dZ[-1]), ip(self.loss),
                                                    np.int32(n), np.int32(CLASSES)))
        blk, grd = _block_grid(be, self.size)
        update = be.bind(k["sgd"], grd, blk, (ip(self.params_flat), ip(self.grads_flat), np.int32(self.size),
                                              np.float32(rate)))
        self.forward_stages = fwd_runs
        self.stages = fwd_runs + [("softmax cross-entropy", xent)] + [r for back in bwd_runs for r in back] + \
            [("SGD update", update)]  # the backward last layer first
        self.forward_launches = [f for _, f in self.forward_stages]
        self.step_launches = [f for _, f in self.stages]

    @property
    def description(self) -> str:
        """The path in words, for a row's params."""
        convs, fcs = PATHS[self.path]
        if convs == fcs == "unroll":
            return "unroll path (conv steps 4 and 6 + GEMM step 8)"
        return ("conv1, conv2: implicit GEMM (conv steps 9 and 10, wgmma, no workspace); fc1-3: "
                + ("unroll path (GEMM step 8)" if fcs == "unroll" else "implicit GEMM"))

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


def stage_times(net: GpuLeNet, settings) -> list[tuple[str, float, int]]:
    """Each stage of the step (GpuLeNet.stages, in step order) timed alone by `measure`, its launches
    repeated back to back: (name, median ms, launches). After the check, since a repeated stage moves the
    weights and sums into gradients; a stage's time alone omits what it overlaps with its neighbours."""
    out = []
    for name, fn in net.stages:
        kernels = net.be.capture(fn).nodes  # counted as the graph is made, as the whole step's are
        out.append((name, measure.measure(net.be, fn, settings).median_ms, kernels))
    return out


def first_step_error(net: GpuLeNet, step, params, ref_loss: float, ref_params) -> float:
    """One training step (`step`: the net's launches, or their graph; None: its launches) from the initial
    weights, logits poisoned first: the larger of its weight changes' error against float64
    (measure.weight_change_error over weights and biases) and its loss's relative error."""
    be = net.be
    step = net.callable(net.step_launches) if step is None else step
    be.fill_nan(net.logits, net.batch * CLASSES)
    be.write(net.loss, np.zeros(1, np.float32))
    step()
    loss = float(be.download(net.loss, np.zeros(1, np.float32))[0])
    return cpu_step_error(params, loss, net.params(), ref_loss, ref_params)


def audited_step(net: GpuLeNet) -> audit.LastBatch | None:
    """The last timed step (audit.trained): every conv's activated output poisoned before it, the weights finite
    and moved after it (a mid-training step has no float64 answer at hand; the first step's check runs again on
    a fresh model after timing, step_audits)."""
    if not audit.enabled(audit.TIMED_OUTPUT):
        return None

    def poison() -> None:
        for z, lay in zip(net.Z, LAYERS):
            s = lay.shape(net.batch)
            net.be.fill_nan(z, s.N * s.K * s.Ho * s.Wo)
    return audit.trained(lambda: np.concatenate([a.ravel() for W, b in net.params() for a in (W, b)]), poison)


def step_audits(stats, params, ref_params, limit: float, fresh) -> list[tuple[str, str | None]]:
    """The defenses of nnbench/audit.py over a timed step: the last step's audit and the device's wait after it
    (from `stats`), the check again on a fresh model (`fresh()`: its error; at other addresses, the timed one
    alive), and no limit that weights which never move would pass (their error is 1)."""
    out = audit.timed_findings(stats)
    if audit.enabled(audit.FRESH_BUFFERS):
        err = fresh()
        out.append((audit.FRESH_BUFFERS, None if err <= limit else (
            f"on a fresh model (other addresses) the first step is wrong (error {err:.3g} > {limit:.3g}): the path "
            "depends on what it has seen")))
    if audit.enabled(audit.ZERO_OUTPUT):
        change = np.concatenate([(r - p).ravel() for (rw, rb), (pw, pb) in zip(ref_params, params)
                                 for r, p in ((rw, pw), (rb, pb))])
        out.append((audit.ZERO_OUTPUT, f"weights that never move would pass this check (limit {limit:g}): give a "
                    "limit below 1" if audit.zeros_pass(change, limit) else None))
    return out


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


def issued_reps() -> int:
    """ISSUED_REPS, or one call while a soak runs (measure.VERDICTS_ONLY: its rows are there for their checks)."""
    return 1 if measure.VERDICTS_ONLY[0] else ISSUED_REPS


def host_issued_ms(backend, fn) -> float:
    """Milliseconds per call of `fn` (after 3 warm-up calls) over issued_reps() calls issued back to
    back from Python between two CUDA events on the default stream, where PyTorch's eager kernels
    run too: launch gaps included, as a training loop sees them."""
    for _ in range(3):
        fn()
    return backend.timed(fn, issued_reps())


def torch_step_check(params, x, labels, rate: float, ref_params) -> tuple[float, float]:
    """PyTorch's first loss and its weight changes after one SGD step from the same weights, against
    float64 (the same measure as ours: measure.weight_change_error over weights and biases): (loss, error)."""
    import torch
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
    err = measure.weight_change_error([W for W, _ in got] + [b for _, b in got],
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
def step_limit(params, ref_params, arithmetic: float, batch: int, precision: str = TF32X3) -> float:
    """The limit on the one-step check (`cpu_step_error`), derived in docs/VERIFICATION.md from two parts:
    - storage: the model's weights live in float32. The initial weights and the updated ones are each rounded
      once, by at most U_FP32 of their size, so the weight changes err by at most U_FP32 (||W0|| + ||W1||) from
      that alone, relative to ||W1 - W0||: one SGD step moves the weights by a thousandth of their size (0.09%
      at batch 64), so this part is the larger (2.8e-5 of the 3.7e-5 measured on the H100 at batch 64, for our
      paths and PyTorch's alike);
    - arithmetic: `arithmetic`, the float32 arithmetic's own error on this step (the CPU model of the unroll
      path, updates in float64), times measure.CHECK_FACTOR as the trainers' checks, times how much larger the
      row's precision's bound is than FP32's at the step's longest reduction (conv1's filter gradient, over
      batch x 28 x 28 outputs).
    No constant that one BLAS passes and another fails: each part follows from this run's weights and data."""
    flat = [np.asarray(a, np.float64) for pair in params for a in pair]
    new = [np.asarray(a, np.float64) for pair in ref_params for a in pair]

    def norm(arrays) -> float:
        return float(np.sqrt(sum(np.sum(a * a) for a in arrays)))
    moved = norm([n - w for n, w in zip(new, flat)])
    storage = measure.U_FP32 * (norm(flat) + norm(new)) / moved if moved > 0 else np.inf
    first = LAYERS[0]
    n = batch * (first.H - first.R + 1) ** 2
    return storage + measure.CHECK_FACTOR * arithmetic * measure.precision_scale(precision, n)


def host_step_error(params, x: np.ndarray, labels: np.ndarray, rate: float, ref_loss: float, ref_params) -> float:
    """The float32 arithmetic's own error on this step: the CPU model of the unroll path against float64."""
    return cpu_step_error(params, *cpu_step(params, x, labels, rate, "unroll"), ref_loss, ref_params)


def check_limit(params, x: np.ndarray, labels: np.ndarray, rate: float, ref_loss: float, ref_params,
                precision: str = TF32X3) -> float:
    """step_limit for this batch, its float32 arithmetic measured here."""
    return step_limit(params, ref_params, host_step_error(params, x, labels, rate, ref_loss, ref_params), len(x),
                      precision)


def row_name(path: str, what: str) -> str:
    """A row's variant: the unroll path keeps its names of before (lenet5-step, ...); another path is
    named in them (lenet5-implicit-step, ...)."""
    return f"lenet5-{what}" if path == "unroll" else f"lenet5-{path}-{what}"


def _path_rows(backend, path: str, params, x, labels, rate: float, settings, base: dict, ref_loss: float, ref_params,
               limit: float):
    """One path's rows: its forward, its step launched and host-issued, and its step as one CUDA graph
    (on a fresh copy of the model), each step checked against float64."""
    net = GpuLeNet(backend, params, x, labels, rate, path)
    err = first_step_error(net, net.callable(net.step_launches), params, ref_loss, ref_params)
    fwd = measure.measure(backend, net.callable(net.forward_launches), settings)
    step = measure.measure(backend, net.callable(net.step_launches), settings, audited_step(net))
    failures = step_audits(step, params, ref_params, limit,
                           lambda: first_step_error(GpuLeNet(backend, params, x, labels, rate, path),
                                                    None, params, ref_loss, ref_params))
    issued_ms = host_issued_ms(backend, net.callable(net.step_launches))
    status = "PASS" if err <= limit else "FAIL"
    rec = audit.judge(dict(base, variant=row_name(path, "step"), step=4 if path == "unroll" else 9,
                           params=f"{net.description}, SGD rate {rate}", precision=TF32X3,
                           median_ms=step.median_ms, iqr_ms=step.iqr_ms, samples=step.samples, rel_err=err,
                           rtol=limit, status=status, timing=step.timing, launches_per_step=len(net.step_launches)),
                      failures)
    if net.notes:
        rec["tiles"] = "; ".join(net.notes)
    yield dict(rec, variant=row_name(path, "forward"), params=net.description, median_ms=fwd.median_ms,
               iqr_ms=fwd.iqr_ms, samples=fwd.samples, timing=fwd.timing, launches_per_step=len(net.forward_launches))
    yield rec
    yield dict(rec, variant=row_name(path, "step-issued"), params=rec["params"] + ", host-issued (launch gaps "
               "included)", median_ms=issued_ms, iqr_ms=None, samples=issued_reps(), timing=None)  # params say how
    if backend.runs_kernels:  # the same step as one CUDA graph, on a fresh copy of the model, checked alike
        gnet = GpuLeNet(backend, params, x, labels, rate, path)
        try:
            graph = backend.capture(gnet.callable(gnet.step_launches))
            gerr = first_step_error(gnet, graph, params, ref_loss, ref_params)
            gstep = measure.measure(backend, graph, settings)
        except KernelFault as e:
            yield dict(base, variant=row_name(path, "step-graph"), step=rec["step"], status="ERROR",
                       error=f"kernel fault: {e}")
        else:
            grec = dict(rec, variant=row_name(path, "step-graph"), params=rec["params"] + f", one CUDA graph of "
                        f"{graph.nodes} kernels", median_ms=gstep.median_ms, iqr_ms=gstep.iqr_ms,
                        samples=gstep.samples, rel_err=gerr, status="PASS" if gerr <= limit else "FAIL",
                        timing=gstep.timing)
            yield grec
            yield dict(grec, variant=row_name(path, "step-graph-issued"), params=grec["params"] + ", host-issued",
                       median_ms=host_issued_ms(backend, graph), iqr_ms=None, samples=issued_reps(), timing=None)


class LeNetRun:
    """One batch's LeNet-5 problem, made once for its paths and PyTorch's rows: the images, the initial
    weights and the float64 reference step. `path_rows` and `torch_rows` each return a list of rows;
    nnbench/workloads/conv/session.py runs a path per case, `run` a command's paths."""

    def __init__(self, backend, batch: int, rate: float = 0.05, seed: int = 0, settings=measure.TimingSettings(),
                 env: dict | None = None) -> None:
        if batch < 1:
            raise NnbenchError(f"--n {batch}: the batch must be >= 1")
        self.be, self.batch, self.rate, self.settings = backend, batch, rate, settings
        per_letter = -(-batch // CLASSES)
        x, labels = images(per_letter, seed)
        self.x, self.labels = x[:batch], labels[:batch]
        self.params = init_params(seed)
        self.base = dict(workload="conv", shape=f"LeNet-5, batch {batch}", N=batch, C=1, H=32, W=32, K=CLASSES, R=5,
                         stride=1, pad=0, seed=seed, **(env or {}))
        check_chain()
        self.ref_loss, self.ref_params, _ = reference_step(self.params, self.x, labels[:batch], rate)
        self._arithmetic: float | None = None

    def limit(self, precision: str = TF32X3) -> float:
        """step_limit for a row of `precision`, the float32 arithmetic measured on first use."""
        if self._arithmetic is None:
            self._arithmetic = host_step_error(self.params, self.x, self.labels, self.rate, self.ref_loss,
                                               self.ref_params)
        return step_limit(self.params, self.ref_params, self._arithmetic, self.batch, precision)

    def path_rows(self, path: str) -> list[dict]:
        """The path's rows (_path_rows), or one SKIP or ERROR row where it cannot run."""
        layer_paths(path)  # an unknown path is refused before anything runs
        if "implicit" in layer_paths(path) and (why := registry.find(VARIANTS, "conv", "implicit-wgmma").arch_problem(
                self.be.device)):
            return [dict(self.base, variant=row_name(path, "step"), status="SKIP", error=why)]
        rows = []
        try:
            for row in _path_rows(self.be, path, self.params, self.x, self.labels, self.rate, self.settings, self.base,
                                  self.ref_loss, self.ref_params, self.limit()):
                rows.append(row)
        except (KernelFault, CompileError) as e:
            rows.append(dict(self.base, variant=row_name(path, "step"), status="ERROR", error=str(e)))
        return rows

    def torch_rows(self) -> list[dict]:
        """PyTorch's forward and step (host-issued), its step checked as ours is: its weight changes after
        one step, and its loss (the larger)."""
        try:
            t = torch_times(self.be, self.params, self.x, self.labels, self.rate)
            t_loss, t_err = torch_step_check(self.params, self.x, self.labels, self.rate, self.ref_params)
        except ImportError:
            return [dict(self.base, variant="torch", status="SKIP", error="PyTorch is not installed")]
        terr = max(t_err, abs(t_loss - self.ref_loss) / abs(self.ref_loss))
        limit = self.limit(FFMA)
        status = "PASS" if terr <= limit else "FAIL"
        return [dict(self.base, variant="torch-forward", step="", params="eager, cuDNN, TF32 off",
                     median_ms=t["forward_ms"], status=status, rel_err=terr, rtol=limit),
                dict(self.base, variant="torch-step", step="", params="eager, cuDNN, TF32 off, SGD",
                     median_ms=t["step_ms"], status=status, rel_err=terr, rtol=limit)]


def run(backend, batch: int, rate: float = 0.05, seed: int = 0, settings=measure.TimingSettings(),
        with_torch: bool = True, env: dict | None = None, paths=DEFAULT_PATHS):
    """Yield the records: ours on each of `paths` (PATHS; each checked against float64 on one step),
    then PyTorch. A path that cannot be built or faults gives an ERROR row; the others still run.
    LeNetRun over a list of paths, for tests and lab scripts (the command runs the same through the
    workload's session)."""
    if batch < 1:
        raise NnbenchError(f"--n {batch}: the batch must be >= 1")
    for path in paths:
        layer_paths(path)  # an unknown path is refused before anything runs
    r = LeNetRun(backend, batch, rate, seed, settings, env)
    for path in paths:
        yield from r.path_rows(path)
    if with_torch:
        yield from r.torch_rows()
