"""Mini-batch training of the character-recognition MLP (`nnbench train --batch B`).

The math is the per-sample trainer's (nnbench/workloads/train/mlp.py) with the gradient averaged over a
batch of B samples, so B = 1 is exactly the per-sample step:
  v = momentum * v + rate * (1/B) sum_b d_l,b o_(l-1),b^T;   W += v
and the reported error is the mean over samples of E = 1/2 sum (t - o)^2.

Versions (registry tag "batched"):
  batched-numpy   NumPy float32 on the host, a BLAS GEMM per layer and direction (the CPU path);
  batched         our GEMMs (the ladder's 3xTF32 mainloop) with sigmoid and slope fused into their
                  epilogues, split-K weight gradients (kernels_cu/mlp/10_batched.cu);
  batched-cublas  the same GEMMs through cuBLAS SGEMM (CuPy, TF32 off) and the epilogues as
                  separate passes (kernels_cu/mlp/11_batched_cublas.cu);
  batched-wgmma   the same GEMMs and epilogues on the ladder's step 9 mainloop (sm_90a), weights
                  neuron-major and deltas sample-major, every layer's update in one launch at the
                  end of the step (kernels_cu/mlp/12_batched_wgmma.cu, WgmmaNet);
and, with --compare torch, PyTorch eager and CUDA-graph rows (mlp.train_torch with a batch).

Every version trains the same fixed number of epochs over the same noisy training set in the same
order, from the same initial weights, so their test accuracies are comparable. Each GPU version is
first checked against the float64 reference after CHECK_STEPS steps, with activations, deltas and
gradient slices poisoned with NaN.

Knows nothing about click or rich.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from nnbench import audit, glyphs, measure, registry
from nnbench.errors import KernelFault, NnbenchError
from nnbench.nets import Net
from nnbench.registry import Variant
from nnbench.runtime.compile import compile_sources
from nnbench.runtime.device import FFMA
from nnbench.runtime.vendor import CublasGemm
from nnbench.workloads.train import mlp
from nnbench.workloads.train.model import (  # noqa: F401 - the mini-batch trainer's math, by its names here
    apply_update,
    forward,
    gradient_sums,
    reference_weights,
    step,
)
from nnbench.workloads.train.outcome import Outcome
from nnbench.workloads.train.variants import VARIANTS

DEFAULT_RATE = 1.0  # on the batch's mean error; configs/nets.yaml's batch_rate overrides it per net
DEFAULT_TRAIN_SAMPLES = 65_536
DEFAULT_EPOCHS = 10
CHECK_STEPS = 3
GEMM_ROLES = ("forward", "backward-data", "weight-gradient")
STEP_TIMING = measure.TimingSettings(budget_s=0.3, min_samples=10, max_noise=0.01)
LAUNCH_TIMING = measure.TimingSettings(budget_s=0.05, min_samples=5, max_noise=0.05)


# -- the math (nnbench/workloads/train/model.py, shared with per-sample training) -----------------
def float32_weights(init, data: glyphs.Dataset, batch: int, hyper: mlp.Hyper, steps: int,
                    reverse: bool = False, update=None) -> list[np.ndarray]:
    """reference_weights' math in float32 (the `batched-numpy` version's arithmetic), for the
    check's tolerance; `reverse` sums in the other order (mlp.float32_weights). `update` replaces
    apply_update (a test plants a defect in it)."""
    update = update or apply_update
    perms = mlp.neuron_orders(tuple(W.shape[1] - 1 for W in init) + (init[-1].shape[0],), reverse)
    params = [W.astype(np.float32) for W in mlp.permute(init, perms)]
    vel = [np.zeros_like(W) for W in params]
    x, t = data.x[:, perms[0]].astype(np.float32), data.t.astype(np.float32)
    scale, mom = np.float32(hyper.rate / batch), np.float32(hyper.momentum)
    for j in range(steps):
        sl = slice(j * batch, (j + 1) * batch)
        update(params, vel, gradient_sums(params, x[sl], t[sl])[0], scale, mom)
    return mlp.permute([W.astype(np.float64) for W in params], perms, inverse=True)


def training_set(bits: int, samples: int, seed: int, flips: int = 2) -> glyphs.Dataset:
    """`samples` noisy letters (every letter equally often, then interleaved so that any batch
    sees all letters), from a seed of its own so it never overlaps the test set."""
    per_letter = -(-samples // len(glyphs.LETTERS))
    d = glyphs.noisy(bits, per_letter, seed=seed + 1000, flips=flips)
    order = np.arange(len(d)).reshape(len(glyphs.LETTERS), per_letter).T.ravel()[:samples]
    return d.take(order)


# -- costs ----------------------------------------------------------------------------------------
def gemm_shapes(layers: tuple[int, ...], batch: int) -> list[tuple[str, int, int, int]]:
    """(role, M, N, K) of the GEMMs of one step as the kernels run them (nets.Net.training_gemms)."""
    return Net("", tuple(layers)).training_gemms(batch)


def flops_per_step(layers: tuple[int, ...], batch: int) -> float:
    """The GEMMs' 2MNK, plus 5 per weight for the momentum update (as mlp.flops_per_iteration)."""
    weights = sum(n_out * (n_in + 1) for n_in, n_out in zip(layers, layers[1:]))
    return sum(2.0 * m * n * k for _, m, n, k in gemm_shapes(layers, batch)) + 5.0 * weights


# -- the GPU state ---------------------------------------------------------------------------------
def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def round4(n: int) -> int:
    return _cdiv(n, 4) * 4


@dataclass(frozen=True)
class GemmKernel:
    """One GEMM kernel of a batched version (10_batched.cu, 12_batched_wgmma.cu) as compiled for one
    tile set."""

    kernel: object  # a loaded runtime Kernel
    params: tuple[tuple[str, int], ...]
    threads: int
    resident: int  # blocks per SM, by the occupancy calculation
    smem: int = 0  # dynamic shared memory per block (step 12's ring)
    maps: tuple = ()  # (box, swizzle) of the A and B tensor maps (step 12)

    def __getattr__(self, name: str) -> int:  # BM, BN, BK, ... of the tile set
        p = dict(object.__getattribute__(self, "params"))
        if name in p:
            return p[name]
        raise AttributeError(name)

    @property
    def label(self) -> str:
        p = dict(self.params)
        inner = f"{p['WM']}x{p['WN']}" if "WM" in p else f"{p['STAGES']} stages"
        return f"{p['BM']}x{p['BN']}x{p['BK']}/{inner}"


GEMM_KERNELS = {"forward": "forward_sigmoid", "backward-data": "backward_delta", "weight-gradient": "weight_gradient"}


def load_gemms(backend, variant: Variant, params: dict, compiled) -> dict[str, GemmKernel]:
    """The three GEMM kernels of one compiled tile set, by role."""
    threads, smem = variant.threads(params), variant.dynamic_smem_bytes(params)
    maps = tuple((variant.map_box(tm, params), tm.swizzle) for tm in variant.tensor_maps)
    out = {}
    for role, name in GEMM_KERNELS.items():
        k = backend.load(compiled, name)
        out[role] = GemmKernel(k, tuple(sorted(params.items())), threads,
                               max(1, backend.occupancy(k, threads, smem).blocks_per_sm), smem, maps)
    return out


@dataclass
class StepLaunch:
    role: str  # forward, backward-data, weight-gradient (the GEMMs), or another pass
    run: object  # no-argument callable that enqueues it
    side: bool = False  # enqueued on the exchange's side stream (a bucket's pass), not the default stream


STREAM_ORDER = ("handoff", "join")  # roles that order the two streams (event record and wait): no work of their own


class BatchedNet:
    """A net's batch state on the GPU in the layout of kernels_cu/mlp/batched_common.cuh, and one
    training step as a list of launches: on our kernels (`gemms`) or with cuBLAS GEMMs.

    Data-parallel (`exchange` given, this net one of `ranks`): `batch` is the global batch, of
    which this rank trains the slice `rank`; the weight gradients of all layers are summed into
    one flat buffer and applied identically on every rank once allreduced. With `bucket_cap` = 0
    the whole buffer is allreduced in one call after the backward pass, on the default stream; with
    a cap (floats) the layers go in buckets (exchange.plan_buckets), each handed to the exchange's
    side stream as soon as its last gradient is written: there its split-K slices are summed, it
    is allreduced and its layers updated, while the default stream goes on with the backward pass;
    the step ends with the default stream waiting for the side stream."""

    def __init__(self, backend, kernels: dict, layers: tuple[int, ...], init: list[np.ndarray],
                 train: glyphs.Dataset, batch: int, hyper: mlp.Hyper, gemms: dict[str, GemmKernel] | None = None,
                 cublas=None, columns: int = 0, exchange=None, rank: int = 0, ranks: int = 1,
                 graph: bool = False, bucket_cap: int = 0) -> None:
        if graph and exchange is not None:
            raise NnbenchError("a graph version trains on one GPU (its step holds no allreduce): run it with --gpus 1")
        self.be, self.k, self.layers, self.hyper, self.graph = backend, kernels, layers, hyper, graph
        self.gemms, self.cublas, self.exchange, self.rank = gemms, cublas, exchange, rank
        self.global_batch, self.batch = batch, batch // ranks  # self.batch: the samples this rank trains
        self.L = len(layers) - 1
        self.ld_h = [round4(n + 1) for n in layers]
        self.ld_d = [round4(n) for n in layers]  # index l: layer l's deltas (l >= 1)
        self.cols = max(self.batch, columns)
        self.H = [None] + [backend.upload(self._activations(layers[l], self.cols, math.nan))
                           for l in range(1, self.L + 1)]
        self.D = [None] + [backend.upload(self._deltas(l)) for l in range(1, self.L + 1)]
        self.W, self.V, self.G, self.slices = [], [], [], []
        sizes = [layers[l + 1] * self.ld_h[l] for l in range(self.L)]
        self.flat_off = np.concatenate([[0], np.cumsum(sizes)]).astype(int)  # the allreduced gradients
        self.flat = backend.upload(np.zeros(int(self.flat_off[-1]), np.float32)) if exchange else None
        self.buckets = None  # weight layers (1-based) per bucket, in backward order; None: one allreduce at the end
        if exchange is not None and bucket_cap > 0 and exchange.stream is not None:
            from nnbench.runtime.exchange import plan_buckets
            self.buckets = [[l + 1 for l in b] for b in plan_buckets(sizes, bucket_cap)]
        for l, W0 in enumerate(init):
            n_in, n_out = layers[l], layers[l + 1]
            self.W.append(backend.upload(self._padded(W0, l)))
            self.V.append(backend.upload(self._padded(np.zeros_like(W0), l)))
            b = self.batch
            s, kps = self._split_k(n_in + 1, n_out, b, gemms["weight-gradient"]) if gemms else (1, b)
            self.slices.append((s, kps))
            if exchange is not None and s == 1:  # written straight into its part of the flat buffer
                self.G.append(int(self._p(self.flat, self.flat_off[l])))
            else:
                self.G.append(backend.upload(np.full((s, n_out, self.ld_h[l]), np.nan, np.float32)))
        self.err = backend.upload(np.zeros(1, np.float32))
        self.load(train)
        self.tpb = 256

    def _deltas(self, l: int) -> np.ndarray:
        """Layer l's deltas, poisoned: (batch columns, ld_d) row-major = feature-major D_l."""
        return np.full((self.cols, self.ld_d[l]), np.nan, np.float32)

    def _activations(self, n: int, cols: int, fill: float) -> np.ndarray:
        """(cols, round4(n + 1)) row-major = column-major H: `fill` above, the row of ones, zero pad."""
        a = np.zeros((cols, round4(n + 1)), np.float32)
        a[:, :n] = fill
        a[:, n] = 1.0
        return a

    def poison(self) -> None:
        """The activations and deltas as a new net holds them (NaN where a step writes), so that a step that
        leaves any of them unwritten puts NaN into the weights (audit.trained)."""
        for l in range(1, self.L + 1):
            self.be.write(self.H[l], self._activations(self.layers[l], self.cols, math.nan))
            self.be.write(self.D[l], self._deltas(l))

    def _split_k(self, m: int, n: int, k: int, g: GemmKernel) -> tuple[int, int]:
        """Slices for the weight-gradient GEMM: as many tiles as the SMs' resident blocks hold in
        one wave, each slice at least 4 k-tiles long. Returns (slices, k per slice), k per slice a
        multiple of BK."""
        tiles = _cdiv(m, g.BM) * _cdiv(n, g.BN)
        # Whole waves only: one block more than the resident slots would double the time.
        want = max(1, min(g.resident * self.be.device.sm_count // tiles, k // (4 * g.BK)))
        kps = _cdiv(_cdiv(k, want), g.BK) * g.BK
        return -(-k // kps), kps

    def load(self, data: glyphs.Dataset) -> None:
        self.n = len(data)
        self.X = self.be.upload(self._activations(self.layers[0], self.n, 0.0)
                                + np.pad(data.x.astype(np.float32), ((0, 0), (0, self.ld_h[0] - self.layers[0]))))
        self.T = self.be.upload(np.ascontiguousarray(data.t, dtype=np.float32))
        self._steps: dict[int, list[StepLaunch]] = {}
        self._graphs: dict[int, object] = {}

    # -- launches ---------------------------------------------------------------------------------
    def _p(self, buf, floats: int = 0) -> np.intp:
        return np.intp(int(buf) + 4 * int(floats))

    def _first(self, j: int) -> int:
        """The first sample this rank trains in batch j."""
        return j * self.global_batch + self.rank * self.batch

    def _input(self, j: int) -> np.intp:
        return self._p(self.X, self._first(j) * self.ld_h[0])

    def _gemm(self, role: str, shape: tuple[int, int, int], args: tuple, sig: str, slices: int = 1):
        m, n, _ = shape
        g = self.gemms[role]
        grid = (_cdiv(m, g.BM), _cdiv(n, g.BN), slices)
        return self.be.bind(g.kernel, grid, (g.threads, 1, 1), (*map(np.int32, shape), *args), sig)

    def _pass(self, name: str, total: int, args: tuple, sig: str, stream=None):
        grid = (self.be.device.stride_blocks(total, self.tpb), 1, 1)
        return self.be.bind(self.k[name], grid, (self.tpb, 1, 1), args, sig, stream=stream)

    def forward_launches(self, x: np.intp, cols: int) -> list[StepLaunch]:
        out = []
        for l in range(self.L):
            hin, ldin = (x, self.ld_h[0]) if l == 0 else (self._p(self.H[l]), self.ld_h[l])
            out += self._forward(l, hin, ldin, cols)
        return out

    def _forward(self, l: int, hin: np.intp, ldin: int, cols: int) -> list[StepLaunch]:
        """H_(l+1) = sigmoid(W_l^T Hin) over `cols` samples."""
        n_in, n_out = self.layers[l], self.layers[l + 1]
        shape = (n_out, cols, n_in + 1)
        if self.cublas is None:
            return [StepLaunch("forward", self._gemm(
                "forward", shape, (self._p(self.W[l]), np.int32(self.ld_h[l]), hin, np.int32(ldin),
                                   self._p(self.H[l + 1]), np.int32(self.ld_h[l + 1])), "iiiPiPiPi"))]
        # H = Wt^T Hin, then the sigmoid as its own pass
        return [StepLaunch("forward", self.cublas.sgemm(True, False, shape, 1.0, int(self.W[l]), self.ld_h[l], int(hin),
                                                        ldin, 0.0, int(self.H[l + 1]), self.ld_h[l + 1])),
                StepLaunch("sigmoid", self._pass("sigmoid_columns", n_out * cols,
                                                 (self._p(self.H[l + 1]), np.int32(self.ld_h[l + 1]), np.int32(n_out),
                                                  np.int32(cols)), "Piii"))]

    def step_launches(self, j: int) -> list[StepLaunch]:
        """Batch j's training step: forward, output deltas, then per layer from the top the
        backward-data GEMM (with the old weights), the weight gradient and the update."""
        if j in self._steps:
            return self._steps[j]
        B, L, ly = self.batch, self.L, self.layers
        x = self._input(j)
        seq = self.forward_launches(x, B)
        seq.append(self._output_delta(j))
        updates = []  # (layer, gradient, slices, slice stride) not yet applied
        closes = {b[-1]: b for b in self.buckets or ()}  # a bucket's lowest layer: its gradient completes it
        for l in range(L, 0, -1):  # weight layer l (1-based) maps H_(l-1) to H_l
            n_out = ly[l]
            hin, ldin = (x, self.ld_h[0]) if l == 1 else (self._p(self.H[l - 1]), self.ld_h[l - 1])
            if l > 1:
                seq += self._backward_data(l, hin, ldin)
            seq.append(self._weight_gradient(l, hin, ldin))
            grad, (slices, _) = self._p(self.G[l - 1]), self._slices(l)
            stride = n_out * self.ld_h[l - 1]
            updates.append((l, grad, slices, stride))
            if self.buckets is not None:
                if l in closes:
                    seq += self._bucket_pass(closes[l], updates)
                    updates = []
                continue
            if self.exchange is not None:
                seq += self._slice_sum(l, grad, slices, stride)
                updates[-1] = (l, self._p(self.flat, self.flat_off[l - 1]), 1, stride)
            if self.exchange is None and not self.UPDATES_AT_END:  # the update follows its gradient at once
                seq += self._updates(updates)
                updates = []
        if self.buckets is not None:  # the next step's forward pass reads the weights the side stream updates
            seq.append(StepLaunch("join", self.exchange.join()))
        elif self.exchange is not None:  # every layer's gradient in one allreduce, then the updates
            seq.append(StepLaunch("allreduce", self.exchange.launcher(self.flat, int(self.flat_off[-1]))))
        seq += self._updates(updates)
        self._steps[j] = seq
        return seq

    def _slice_sum(self, l: int, grad: np.intp, slices: int, stride: int, stream=None) -> list[StepLaunch]:
        """Weight layer l's split-K slices summed into its part of the flat buffer (none for one slice,
        which the weight-gradient GEMM wrote there itself)."""
        if slices == 1:
            return []
        n_in, n_out = self.layers[l - 1], self.layers[l]
        return [StepLaunch("gradient-sum", self._pass(
            "sum_slices", (n_in + 1) * n_out, (grad, np.int32(self.ld_h[l - 1]), np.int32(n_in + 1), np.int32(n_out),
                                               np.int32(slices), np.int64(stride),
                                               self._p(self.flat, self.flat_off[l - 1])),
            "PiiiiqP", stream), side=stream is not None)]

    def _bucket_pass(self, bucket: list[int], pending: list[tuple]) -> list[StepLaunch]:
        """One bucket's pass on the side stream, once the default stream has written its gradients:
        the split-K sums into the flat buffer, the allreduce of its range, its layers' updates."""
        from nnbench.runtime.exchange import bucket_range
        ex = self.exchange
        side = ex.stream
        seq = [StepLaunch("handoff", ex.handoff())]
        for l, grad, slices, stride in pending:
            seq += self._slice_sum(l, grad, slices, stride, side)
        first, count = bucket_range(self.flat_off, [l - 1 for l in bucket])
        seq.append(StepLaunch("allreduce", ex.side_launcher(self._p(self.flat, first), count), side=True))
        flat = [(l, self._p(self.flat, self.flat_off[l - 1]), 1, stride) for l, _, _, stride in pending]
        return seq + [replace(la, side=True) for la in self._updates(flat, side)]

    UPDATES_AT_END = False  # True: every layer's update after the whole backward pass

    def step(self, j: int):
        """Batch j's training step as one no-argument call: its launches one by one, or (a graph
        version) their CUDA graph, captured on first use and replayed from then on."""
        if not self.graph:
            return self.callable(self.step_launches(j))
        if j not in self._graphs:
            streams = (self.cublas.point,) if self.cublas is not None else ()
            self._graphs[j] = self.be.capture(self.callable(self.step_launches(j)), streams)
        return self._graphs[j]

    def _updates(self, pending: list[tuple], stream=None) -> list[StepLaunch]:
        return [self._update(*p, stream=stream) for p in pending]

    def _slices(self, l: int) -> tuple[int, int]:
        """(split-K slices, k per slice) of weight layer l's gradient."""
        return self.slices[l - 1] if self.cublas is None else (1, self.batch)

    def _output_delta(self, j: int) -> StepLaunch:
        L, n, B = self.L, self.layers[self.L], self.batch
        return StepLaunch("output-delta", self._pass(
            "output_delta_batch", n * B,
            (self._p(self.H[L]), np.int32(self.ld_h[L]), self._p(self.T, self._first(j) * n), self._p(self.D[L]),
             *map(np.int32, self._delta_strides()), np.int32(n), np.int32(B), self._p(self.err)), "PiPPiiiiP"))

    def _delta_strides(self) -> tuple[int, int]:
        """(per sample, per neuron) strides of the output layer's deltas."""
        return self.ld_d[self.L], 1

    def _backward_data(self, l: int, hin: np.intp, ldin: int) -> list[StepLaunch]:
        """D_(l-1) = (W_l D_l) * h(1 - h), h = Hin."""
        n_in, n_out, B = self.layers[l - 1], self.layers[l], self.batch
        w, ldw = self._p(self.W[l - 1]), self.ld_h[l - 1]
        shape = (n_in, B, n_out)
        if self.cublas is None:
            return [StepLaunch("backward-data", self._gemm(
                "backward-data", shape, (w, np.int32(ldw), self._p(self.D[l]), np.int32(self.ld_d[l]),
                                         self._p(self.D[l - 1]), np.int32(self.ld_d[l - 1]), hin, np.int32(ldin)),
                "iiiPiPiPiPi"))]
        return [StepLaunch("backward-data", self.cublas.sgemm(False, False, shape, 1.0, int(w), ldw, int(self.D[l]),
                                                              self.ld_d[l], 0.0, int(self.D[l - 1]), self.ld_d[l - 1])),
                StepLaunch("slope", self._pass(
                    "scale_by_slope", n_in * B, (self._p(self.D[l - 1]), np.int32(self.ld_d[l - 1]), hin,
                                                 np.int32(ldin), np.int32(n_in), np.int32(B)), "PiPiii"))]

    def _weight_gradient(self, l: int, hin: np.intp, ldin: int) -> StepLaunch:
        """G_l = Hin D_l^T, as split-K slices on our kernels (cuBLAS picks its own split)."""
        n_in, n_out, B = self.layers[l - 1], self.layers[l], self.batch
        ldw = self.ld_h[l - 1]
        shape = (n_in + 1, n_out, B)
        if self.cublas is None:
            slices, kps = self.slices[l - 1]
            return StepLaunch("weight-gradient", self._gemm(
                "weight-gradient", shape, (hin, np.int32(ldin), self._p(self.D[l]), np.int32(self.ld_d[l]),
                                           self._p(self.G[l - 1]), np.int32(ldw), np.int32(kps),
                                           np.int64(n_out * ldw)), "iiiPiPiPiiq", slices))
        return StepLaunch("weight-gradient", self.cublas.sgemm(False, True, shape, 1.0, int(hin), ldin, int(self.D[l]),
                                                               self.ld_d[l], 0.0, int(self.G[l - 1]), ldw))

    def _update(self, l: int, grad: np.intp, slices: int, stride: int, stream=None) -> StepLaunch:
        """v = momentum v + rate sum of the gradient's slices; W += v, for weight layer l."""
        n_in, n_out = self.layers[l - 1], self.layers[l]
        rate, mom = np.float32(self.hyper.rate / self.global_batch), np.float32(self.hyper.momentum)
        return StepLaunch("update", self._pass(
            "momentum_update", (n_in + 1) * n_out,
            (self._p(self.W[l - 1]), self._p(self.V[l - 1]), grad, np.int32(self.ld_h[l - 1]), np.int32(n_in + 1),
             np.int32(n_out), np.int32(slices), np.int64(stride), rate, mom), "PPPiiiiqff", stream))

    @staticmethod
    def callable(launches: list[StepLaunch]):
        fns = [la.run for la in launches]

        def run():
            for f in fns:
                f()
        return run

    # -- state ------------------------------------------------------------------------------------
    def _padded(self, W: np.ndarray, l: int) -> np.ndarray:
        """Layer l's (n_out, n_in + 1) weights as column-major Wt: its rows, padded to the ld."""
        wt = np.zeros((W.shape[0], self.ld_h[l]), np.float32)
        wt[:, :W.shape[1]] = W
        return wt

    def set_state(self, params: list[np.ndarray], vel: list[np.ndarray]) -> None:
        """Weights and velocities from the host (to measure one step from a reference's state)."""
        for l, (W, v) in enumerate(zip(params, vel)):
            self.be.write(self.W[l], self._padded(W, l))
            self.be.write(self.V[l], self._padded(v, l))

    def weights(self, init: list[np.ndarray]) -> list[np.ndarray]:
        return self._download(self.W, init)

    def velocities(self, init: list[np.ndarray]) -> list[np.ndarray]:
        return self._download(self.V, init)

    def _download(self, bufs, like: list[np.ndarray]) -> list[np.ndarray]:
        out = []
        for l, W0 in enumerate(like):
            wt = self.be.download(bufs[l], np.zeros((W0.shape[0], self.ld_h[l]), np.float32))
            out.append(wt[:, :W0.shape[1]].astype(np.float64))
        return out

    def error_reset(self) -> None:
        self.be.write(self.err, np.zeros(1, np.float32))

    def error_sum(self) -> float:
        return float(self.be.download(self.err, np.zeros(1, np.float32))[0])

    def feedforward(self, data: glyphs.Dataset) -> tuple[np.ndarray, float]:
        """Outputs for every sample of `data` (at most `columns` samples) and the device ms."""
        if len(data) > self.cols:
            raise ValueError(f"{len(data)} samples; this net holds {self.cols} columns")
        x = self.be.upload(self._activations(self.layers[0], len(data), 0.0)
                           + np.pad(data.x.astype(np.float32), ((0, 0), (0, self.ld_h[0] - self.layers[0]))))
        ms = self.be.timed(self.callable(self.forward_launches(self._p(x), len(data))), 1)
        h = self.be.download(self.H[self.L], np.zeros((self.cols, self.ld_h[self.L]), np.float32))
        return h[:len(data), :self.layers[self.L]].astype(np.float64), ms


class WgmmaNet(BatchedNet):
    """BatchedNet on step 12's kernels (kernels_cu/mlp/12_batched_wgmma.cu, the step 9 mainloop): the
    weights neuron-major (Wn_l, ld = round4(n_l)) and the deltas sample-major (DT_l, ld = round4(B)),
    so that every GEMM reads A M-major and B K-major by tensor map; the activations, the gradient
    slices and the data-parallel buffer keep BatchedNet's layout."""

    def _padded(self, W: np.ndarray, l: int) -> np.ndarray:
        """Layer l's (n_out, n_in + 1) weights as column-major Wn: row i of the array is input i."""
        wn = np.zeros((W.shape[1], round4(W.shape[0])), np.float32)
        wn[:, :W.shape[0]] = W.T
        return wn

    def _download(self, bufs, like: list[np.ndarray]) -> list[np.ndarray]:
        out = []
        for l, W0 in enumerate(like):
            wn = self.be.download(bufs[l], np.zeros((W0.shape[1], round4(W0.shape[0])), np.float32))
            out.append(wn[:, :W0.shape[0]].T.astype(np.float64))
        return out

    @property
    def ld_t(self) -> int:
        return round4(self.batch)

    def _deltas(self, l: int) -> np.ndarray:
        return np.full((self.layers[l], self.ld_t), np.nan, np.float32)

    def _delta_strides(self) -> tuple[int, int]:
        return 1, self.ld_t

    def _mapped(self, role: str, shape: tuple[int, int, int], a: tuple, b: tuple, args: tuple, sig: str,
                slices: int = 1):
        """A launch of `role`'s kernel with tensor maps over operands a and b, each (pointer, rows,
        columns, leading dimension) in floats, column-major."""
        from nnbench.runtime import tensormap
        from nnbench.runtime.params import raw
        g = self.gemms[role]
        maps = []
        for (ptr, rows, cols, ld), (box, swizzle) in zip((a, b), g.maps):
            dims, strides = (rows, cols), (4 * ld,)
            if why := tensormap.tiled_problem(int(ptr), dims, strides, box, swizzle):
                raise NnbenchError(f"{role} GEMM operand {dims} at ld {ld}: {why}")
            maps.append(tensormap.encode_tiled(int(ptr), dims, strides, box, swizzle))
        m, n, _ = shape
        grid = (_cdiv(m, g.BM), _cdiv(n, g.BN), slices)
        full = "iiiPP" + raw(tensormap.MAP_BYTES, tensormap.MAP_ALIGN) * 2 + sig
        return self.be.bind(g.kernel, grid, (g.threads, 1, 1), (*map(np.int32, shape), a[0], b[0], *maps, *args),
                            full, smem=g.smem)

    def _forward(self, l: int, hin: np.intp, ldin: int, cols: int) -> list[StepLaunch]:
        n_in, n_out = self.layers[l], self.layers[l + 1]
        wn = (self._p(self.W[l]), n_out, n_in + 1, round4(n_out))
        return [StepLaunch("forward", self._mapped(
            "forward", (n_out, cols, n_in + 1), wn, (hin, n_in + 1, cols, ldin),
            (self._p(self.H[l + 1]), np.int32(self.ld_h[l + 1])), "Pi"))]

    def _backward_data(self, l: int, hin: np.intp, ldin: int) -> list[StepLaunch]:
        n_in, n_out, B = self.layers[l - 1], self.layers[l], self.batch
        dt = (self._p(self.D[l]), B, n_out, self.ld_t)
        wn = (self._p(self.W[l - 1]), n_out, n_in, round4(n_out))  # its first n_in columns: no bias
        return [StepLaunch("backward-data", self._mapped(
            "backward-data", (B, n_in, n_out), dt, wn,
            (self._p(self.D[l - 1]), np.int32(self.ld_t), hin, np.int32(ldin)), "PiPi"))]

    def _weight_gradient(self, l: int, hin: np.intp, ldin: int) -> StepLaunch:
        n_in, n_out, B = self.layers[l - 1], self.layers[l], self.batch
        slices, kps = self.slices[l - 1]
        ldw = self.ld_h[l - 1]
        return StepLaunch("weight-gradient", self._mapped(
            "weight-gradient", (n_in + 1, n_out, B), (hin, n_in + 1, B, ldin),
            (self._p(self.D[l]), B, n_out, self.ld_t),
            (self._p(self.G[l - 1]), np.int32(ldw), np.int32(kps // self.gemms["weight-gradient"].BK),
             np.int64(n_out * ldw)), "Piiq", slices))

    UPDATES_AT_END = True
    MAX_LAYERS, LAYER_FORMAT = 32, "PPPqiiiiii"  # 12_batched_wgmma.cu's UpdateTable, UpdateLayer

    def _updates(self, pending: list[tuple], stream=None) -> list[StepLaunch]:
        """One launch of momentum_update_transposed for every pending layer: a table of the layers
        (by value, a kernel parameter), a block per 32 x 32 tile of each."""
        import struct

        from nnbench.runtime.params import raw
        if not pending:
            return []
        if len(pending) > self.MAX_LAYERS:
            raise NnbenchError(f"batched-wgmma updates at most {self.MAX_LAYERS} layers in one launch; the net has "
                               f"{len(pending)}")
        rows, blocks = [], 0
        for l, grad, slices, stride in sorted(pending):
            n_in, n_out = self.layers[l - 1], self.layers[l]
            rows.append(struct.pack(self.LAYER_FORMAT, int(self.W[l - 1]), int(self.V[l - 1]), int(grad), stride,
                                    round4(n_out), self.ld_h[l - 1], n_in + 1, n_out, slices, blocks))
            blocks += _cdiv(n_in + 1, 32) * _cdiv(n_out, 32)
        size = struct.calcsize(self.LAYER_FORMAT)
        table = b"".join(rows).ljust(self.MAX_LAYERS * size, b"\0") + struct.pack("i", len(rows))
        table = table.ljust(-(-len(table) // 8) * 8, b"\0")
        rate, mom = np.float32(self.hyper.rate / self.global_batch), np.float32(self.hyper.momentum)
        return [StepLaunch("update", self.be.bind(self.k["momentum_update_transposed"], (blocks, 1, 1), (32, 32, 1),
                                                  (table, rate, mom), raw(len(table), 8) + "ff", stream=stream))]


# -- training -------------------------------------------------------------------------------------
def _fixed_epochs(out: Outcome, epochs: int, steps_per_epoch: int, batch: int, run_epoch, progress) -> None:
    """run_epoch() trains one epoch and returns (seconds, summed E over its samples)."""
    for e in range(epochs):
        seconds, err_sum = run_epoch()
        out.train_seconds += seconds
        out.samples_s.append(seconds / steps_per_epoch)
        out.steps += steps_per_epoch
        out.epochs = e + 1
        out.final_error = err_sum / (steps_per_epoch * batch)
        out.error_curve.append((out.steps, out.final_error))
        if progress:
            progress(out.steps, out.final_error)


def train_numpy(layers, init, train, test, batch: int, epochs: int, hyper: mlp.Hyper, progress=None,
                exchange=None, rank: int = 0, ranks: int = 1, bucket_cap: int = 0) -> Outcome:
    """`batched-numpy`: the reference's math in float32 on the host. With `exchange` (one of
    `ranks` MPI ranks), each rank takes its slice of every batch, and the summed gradients and
    errors are allreduced before every rank applies the same update: in one call after the
    backward pass, or (bucket_cap floats > 0) bucket by bucket, each a non-blocking allreduce
    started as soon as its layers' gradients exist (exchange.plan_buckets), all awaited before the
    update."""
    params = [W.astype(np.float32) for W in init]
    vel = [np.zeros_like(W) for W in params]
    x, t = train.x.astype(np.float32), train.t.astype(np.float32)
    steps, sub = len(train) // batch, batch // ranks
    out = Outcome("batched-numpy", launches_per_step=0)
    scale, mom = np.float32(hyper.rate / batch), np.float32(hyper.momentum)
    sizes = [W.size for W in params]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    flat = np.empty(int(offsets[-1]), np.float32)
    if exchange is not None and bucket_cap > 0:
        from nnbench.runtime.exchange import bucket_range, plan_buckets
        ranges = {b[-1]: bucket_range(offsets, b) for b in plan_buckets(sizes, bucket_cap)}
    else:
        ranges = {}
    started: list = []  # (request, the part it sums) of this step's buckets
    # The step's split, host clock: `spent["math"]` the gradient and update arithmetic, `spent["mpi"]` the time
    # this rank is inside an MPI call (starting a bucket, waiting for it, the one allreduce), `spent["copy"]`
    # the copies into the flat buffer, taken out of the arithmetic's span because they happen inside it.
    spent = dict(math=0.0, mpi=0.0, copy=0.0)

    def ready(l: int, g: np.ndarray) -> None:
        t0 = time.perf_counter()
        flat[offsets[l]:offsets[l + 1]] = g.ravel()
        t1 = time.perf_counter()
        spent["copy"] += t1 - t0
        if l in ranges:
            first, count = ranges[l]
            part = flat[first:first + count]
            started.append((exchange.start(part), part))
            spent["mpi"] += time.perf_counter() - t1

    def run_epoch():
        t0, total = time.perf_counter(), 0.0
        for j in range(steps):
            lo = j * batch + rank * sub
            held = spent["copy"] + spent["mpi"]
            a = time.perf_counter()
            grads, e = gradient_sums(params, x[lo:lo + sub], t[lo:lo + sub], ready if exchange is not None else None)
            b = time.perf_counter()
            spent["math"] += b - a - (spent["copy"] + spent["mpi"] - held)
            if exchange is not None:
                if ranges:
                    for request, _ in started:
                        request.Wait()
                    started.clear()
                else:
                    exchange.allreduce(flat)
                spent["mpi"] += time.perf_counter() - b
                grads = [flat[offsets[l]:offsets[l + 1]].reshape(g.shape) for l, g in enumerate(grads)]
            a = time.perf_counter()
            apply_update(params, vel, grads, scale, mom)
            spent["math"] += time.perf_counter() - a
            total += e
        if exchange is not None:
            total = exchange.w.sum(total)
        return time.perf_counter() - t0, total

    _fixed_epochs(out, epochs, steps, batch, run_epoch, progress)
    out.seconds_per_step = out.train_seconds / out.steps
    out.kernels_us = 1e6 * spent["math"] / out.steps
    if exchange is not None:  # the step without its time inside MPI: what the GPU rows call compute_us
        out.compute_us = out.seconds_per_step * 1e6 - 1e6 * spent["mpi"] / out.steps
    out.test_outputs = forward(params, test.x.astype(np.float32))[-1].astype(np.float64)
    out.test_accuracy = mlp.accuracy(out.test_outputs, test.t)
    out.train_accuracy = mlp.accuracy(forward(params, x)[-1], train.t)
    out.weights = [W.astype(np.float64) for W in params]
    return out


def check_tolerance(init, data: glyphs.Dataset, batch: int, hyper: mlp.Hyper, steps: int = CHECK_STEPS,
                    ref: list[np.ndarray] | None = None) -> float:
    """The limit on the check's error: mlp.CHECK_FACTOR x the float32 arithmetic's own error on the
    same steps (the larger of two summation orders), as mlp.check_tolerance; `ref`: the float64
    reference's weights after those steps, where the caller has them."""
    from concurrent.futures import ThreadPoolExecutor
    # the two float32 orders side by side: numpy's element-wise work (sigmoid, updates) runs on one core a call
    # and releases the GIL, so two threads halve the check's host time (Net 8 at B=4096: ~2.5 s a run)
    with ThreadPoolExecutor(2) as pool:
        orders = list(pool.map(lambda r: float32_weights(init, data, batch, hyper, steps, reverse=r), (False, True)))
        ref = reference_weights(init, data, batch, hyper, steps) if ref is None else ref
    return mlp.CHECK_FACTOR * max(mlp.weight_change_error(w, ref, init) for w in orders)


def check(net: BatchedNet, init, train, hyper: mlp.Hyper, ref: list[np.ndarray] | None = None) -> float:
    """Weight changes after CHECK_STEPS steps against the float64 reference (mlp.weight_change_error);
    `ref`: that reference's weights, where the caller has them."""
    for j in range(CHECK_STEPS):
        net.step(j)()
    net.be.synchronize()
    ref = reference_weights(init, train, net.global_batch, hyper, CHECK_STEPS) if ref is None else ref
    return mlp.weight_change_error(net.weights(init), ref, init)


def train_gpu(net: BatchedNet, name: str, train, test, epochs: int, progress=None, init=None) -> Outcome:
    """Fixed epochs of training, the accuracies, then the steady-state step `measure`d (a fixed count where a
    collective is in it); with `init` (the initial weights, for their shapes) the last timed step is audited
    (audit.trained: activations and deltas poisoned before it, the weights finite and moved after it)."""
    steps = net.n // net.global_batch
    epoch = [net.step(j) for j in range(steps)]
    out = Outcome(name, launches_per_step=sum(la.role not in STREAM_ORDER for la in net.step_launches(0)))

    def run_epoch():
        net.error_reset()
        ms = net.be.timed(lambda: [f() for f in epoch], 1)
        err = net.error_sum()
        return ms * 1e-3, err if net.exchange is None else net.exchange.w.sum(err)

    _fixed_epochs(out, epochs, steps, net.global_batch, run_epoch, progress)
    out.test_outputs = net.feedforward(test)[0]
    out.test_accuracy = mlp.accuracy(out.test_outputs, test.t)
    train_out = np.concatenate([net.feedforward(train.take(slice(i, i + net.cols)))[0]
                                for i in range(0, len(train), net.cols)])
    out.train_accuracy = mlp.accuracy(train_out, train.t)
    # Steady state, after the accuracy is taken (these steps go on training on batch 0).
    world = net.exchange.w if net.exchange is not None else None
    if world is None:
        last = audit.trained(lambda: np.concatenate([W.ravel() for W in net.weights(init)]), net.poison) \
            if init is not None and audit.enabled(audit.TIMED_OUTPUT) else None
        stats = measure.measure(net.be, epoch[0], STEP_TIMING, last)
        out.failures += audit.timed_findings(stats)
    else:
        stats = step_time(net.be, world, epoch[0], STEP_TIMING)
    out.timed_by(stats)
    launches = net.step_launches(0)
    out.role_us = role_times(net.be, launches, exchange=net.exchange)
    out.comm_us = out.role_us.get("allreduce")
    if world is not None:  # the split: exposed communication = the step - the step without its allreduces
        out.own_step_us = 1e3 * stats.own_median_ms
        local = net.callable([la for la in launches if la.role != "allreduce"])
        out.compute_us = 1e3 * measure.measure_collective(net.be, local, world, STEP_TIMING).median_ms
        out.buckets = sum(la.role == "allreduce" for la in launches)
    return out


def backward_timeline(net: BatchedNet, settings: measure.TimingSettings = LAUNCH_TIMING):
    """The backward pass of `net` (data-parallel, one allreduce) as nnbench/runtime/buckets.py models it:
    each launch timed alone, laid end to end on the default stream from the output deltas on; a layer's
    gradient is ready once its weight-gradient launch ends; its split-K sum and update are its side work
    (they move to the side stream with its bucket); an update launch for several layers (batched-wgmma's
    one) is shared among them by size."""
    from nnbench.runtime.buckets import Backward
    launches = net.step_launches(0)
    net.callable(launches)()  # every activation and delta written once before timing
    L = net.L
    ready, side = [0.0] * L, [0.0] * L
    clock, started, layer, updates = 0.0, False, L, []
    for la in launches:
        started = started or la.role == "output-delta"
        if not started or la.role in STREAM_ORDER or la.role == "allreduce":
            continue
        us = 1e3 * measure.measure(net.be, la.run, settings).median_ms
        if la.role == "update":  # after the allreduce, in backward order
            updates.append(us)
        elif la.role == "gradient-sum":
            side[layer] += us
        else:
            clock += us
            if la.role == "weight-gradient":
                layer -= 1
                ready[layer] = clock
    sizes = [int(net.flat_off[l + 1] - net.flat_off[l]) for l in range(L)]
    for l in range(L):
        side[l] += updates[L - 1 - l] if len(updates) == L else sum(updates) * sizes[l] / sum(sizes)
    return Backward(sizes, ready, side, ready[0])


def step_time(backend, world, fn, settings: measure.TimingSettings) -> measure.Stats:
    """The steady-state step: `measure`d on one GPU; on each rank of a data-parallel run
    `measure_collective` (the same hot samples, every choice agreed across the ranks, whose collectives
    must match call for call), and then the slowest rank's median is the step (`median_ms`; this rank's
    own stays in `own_median_ms`)."""
    if world is None:
        return measure.measure(backend, fn, settings)
    stats = measure.measure_collective(backend, fn, world, settings)
    stats.own_median_ms = stats.median_ms
    stats.median_ms = world.max(stats.median_ms)
    return stats


def role_times(backend, launches: list[StepLaunch], settings: measure.TimingSettings = LAUNCH_TIMING,
               exchange=None) -> dict[str, float]:
    """Microseconds per step by role: each launch timed alone (median), summed per role. The
    allreduce is a collective: every rank must call it equally often, so it is timed by
    measure_collective, whose choices the ranks agree on. A launch on the exchange's side stream is timed
    between a handoff to the side stream and a join back, so that the default stream's events
    enclose it."""
    out: dict[str, float] = {}
    for la in launches:
        if la.role in STREAM_ORDER:
            continue
        run = la.run
        if la.side:
            handoff, join = exchange.handoff(), exchange.join()
            run = (lambda h=handoff, f=la.run, j=join: (h(), f(), j()))
        stats = measure.measure_collective(backend, run, exchange.w, settings) if la.role == "allreduce" else \
            measure.measure(backend, run, settings)
        out[la.role] = out.get(la.role, 0.0) + 1e3 * stats.median_ms
    return out


# -- versions, tiles and tuning -------------------------------------------------------------------
def versions(backend: str | None = None) -> list[Variant]:
    return [v for v in registry.of_workload(VARIANTS, "train", backend) if "batched" in v.tags]


def default_version(backend) -> str:
    return "batched" if getattr(backend, "device", None) is not None else "batched-numpy"


def tile_sets(variant: Variant) -> list[dict]:
    """The parameter sets a version is compiled for: its defaults, then its tuning candidates."""
    sets = [variant.defaults()] + [dict(variant.defaults(), **dict(c)) for c in variant.candidates]
    return [dict(t) for t in dict.fromkeys(tuple(sorted(p.items())) for p in sets)]


def compile_version(arch: str, variant: Variant) -> list[tuple[dict, object]]:
    """(params, compiled module or the exception) for each of the version's tile sets."""
    sets = tile_sets(variant)
    return list(zip(sets, compile_sources(variant.target(arch), [(variant.source, p) for p in sets])))


ELEMENTWISE = ("output_delta_batch", "momentum_update", "sum_slices", "sigmoid_columns", "scale_by_slope",
               "momentum_update_transposed")


def open_net(backend, variant: Variant, compiled, layers, init, train, batch, hyper, columns: int = 0,
             gemms: dict[str, GemmKernel] | None = None, cublas: CublasGemm | None = None, exchange=None,
             rank: int = 0, ranks: int = 1, bucket_cap: int = 0) -> BatchedNet:
    """A fresh net for `variant` from its compile_version output; our GEMMs are the first tile
    set's unless `gemms` (from `tune`) says otherwise."""
    params, comp = compiled[0]
    kernels = {}
    for name in ELEMENTWISE:
        try:
            kernels[name] = backend.load(comp, name)
        except Exception:  # noqa: BLE001 - each module holds its own passes only
            continue
    if "cublas" in variant.tags:
        return BatchedNet(backend, kernels, layers, init, train, batch, hyper, cublas=cublas or CublasGemm(backend),
                          columns=columns, exchange=exchange, rank=rank, ranks=ranks, graph="graph" in variant.tags,
                          bucket_cap=bucket_cap)
    net = WgmmaNet if variant.runner == "batched-wgmma" else BatchedNet
    return net(backend, kernels, layers, init, train, batch, hyper,
               gemms=gemms or load_gemms(backend, variant, params, comp), columns=columns, exchange=exchange,
               rank=rank, ranks=ranks, graph="graph" in variant.tags, bucket_cap=bucket_cap)


GRAPHED = "whole step as one CUDA graph, one launch per step"  # the params of a graph version's row
TUNE_TIMING = measure.TimingSettings(budget_s=0.01, min_samples=3, max_noise=0.05, energy=False)


def tune(backend, variant: Variant, compiled, layers, init, train, batch, hyper) -> dict[str, GemmKernel]:
    """For each GEMM role, the tile set whose launches take least time on this net and batch:
    every set is timed on the step's real shapes (a quick median per launch), as cuBLAS's
    heuristics pick a kernel per shape, but measured rather than predicted."""
    best: dict[str, tuple[float, GemmKernel]] = {}
    first = train.take(slice(0, batch))
    for params, comp in compiled:
        gemms = load_gemms(backend, variant, params, comp)
        net = open_net(backend, variant, [(params, comp)], layers, init, first, batch, hyper, gemms=gemms)
        launches = net.step_launches(0)
        net.callable(launches)()  # every activation and delta written once before timing
        times = role_times(backend, [la for la in launches if la.role in GEMM_ROLES], TUNE_TIMING)
        for role, us in times.items():
            if role not in best or us < best[role][0]:
                best[role] = (us, gemms[role])
    return {role: g for role, (_, g) in best.items()}


# -- the command's whole job ----------------------------------------------------------------------
class BatchRun:
    """One net's mini-batch training at one batch, made once for all its versions: the training and
    test sets, the initial weights, the step's GEMMs through cuBLAS (the yardstick of every row), the
    data-parallel exchange, and the float64 reference after CHECK_STEPS steps and the check's limit
    (on first use). `version` and `torch` each train one row and return (record, Outcome);
    nnbench/workloads/train/session.py runs one per case, `run` all of a command's versions.

    Under MPI (`world`), every rank makes the same rows in the same order and trains its slice of each
    batch; the GPU versions exchange gradients through `exchange_kind`, the CPU one through MPI, in
    buckets of `bucket_mb` (0: one allreduce after the backward pass; the GPU's mpi exchange always
    one); PyTorch is then one row of PyTorch DDP (NCCL) over the same ranks (`torch("ddp")`).
    Timing: a GPU version's step is `measure`d in steady state (`measure_collective` where a collective
    is in it, the slowest rank's median the step: step_time); the host version's is its epochs' host clock."""

    def __init__(self, backend, layers: tuple[int, ...], hyper: mlp.Hyper, batch: int, epochs: int = DEFAULT_EPOCHS,
                 train_samples: int = DEFAULT_TRAIN_SAMPLES, test_per_letter: int = 10, flips: int = 2,
                 progress=None, env: dict | None = None, world=None, exchange_kind: str = "nccl",
                 bucket_mb: float | None = None) -> None:
        if train_samples < batch:
            raise NnbenchError(f"--train-samples {train_samples}: needs at least one batch of {batch}")
        self.ranks, self.rank = (world.size, world.rank) if world else (1, 0)
        if batch % self.ranks:
            raise NnbenchError(f"--batch {batch} does not split evenly over {self.ranks} ranks: give a multiple of "
                               f"{self.ranks}")
        self.be, self.layers, self.hyper, self.batch, self.epochs = backend, layers, hyper, batch, epochs
        self.progress, self.world, self.exchange_kind = progress, world, exchange_kind
        self.train = training_set(layers[0], train_samples, hyper.seed, flips)
        self.test = glyphs.noisy(layers[0], test_per_letter, seed=hyper.seed + 1, flips=flips)
        self.init = mlp.init_params(layers, hyper.seed, hyper.init_scale, hyper.init)
        self.steps_per_epoch = len(self.train) // batch
        self.base = dict(workload="train", layers="-".join(map(str, layers)), encoding=layers[0], batch=batch,
                         epochs=epochs, train_samples=len(self.train), steps_per_epoch=self.steps_per_epoch,
                         init=hyper.init, init_scale=hyper.init_scale, rate=hyper.rate, momentum=hyper.momentum,
                         seed=hyper.seed, test_samples=len(self.test), flops_per_step=flops_per_step(layers, batch),
                         **(env or {}))
        self.base.update(ranks=self.ranks,
                         exchange=(exchange_kind if backend.runs_kernels else "mpi") if world else "")
        self.sub = batch // self.ranks
        self.cublas_gemm_us = _cublas_gemms(backend, layers, self.init, self.train, self.sub, hyper) \
            if backend.has_vendor_libs else None
        from nnbench.runtime import exchange
        # no --bucket-mb: each GPU version's buckets come from the measured allreduce curve (choose_buckets)
        self.auto_buckets = bucket_mb is None and world is not None and backend.runs_kernels and \
            exchange_kind == "nccl"
        self.bucket_mb = exchange.DEFAULT_BUCKET_MB if bucket_mb is None else bucket_mb
        self.cap = exchange.bucket_floats(self.bucket_mb)
        self.exch = None
        self.curve = None  # the allreduce curve, once measured (or read from the cache)
        if world is not None:
            self.exch = exchange.CpuExchange(world) if not backend.runs_kernels else exchange.gpu_exchange(
                exchange_kind, world, backend, flat_size(layers))
        self.rtol: float | None = None  # the check's limit, once a GPU version has been checked
        self.ref: list[np.ndarray] | None = None  # the float64 reference after CHECK_STEPS steps, made once

    def _say(self, name: str):
        return (lambda it, err: self.progress(name, it, err)) if self.progress else None

    def version(self, v: Variant, compiled=None) -> tuple[dict, Outcome | None]:
        """Version v (at its tuned tile sets), checked first on the GPU, then trained; `compiled`: its
        compile_version output where the caller has it (else compiled here, from the cache)."""
        be, layers, init, train, test, hyper, batch = (self.be, self.layers, self.init, self.train, self.test,
                                                       self.hyper, self.batch)
        rec = dict(self.base, version=v.name, step=v.step, precision=v.precision,
                   params=GRAPHED if "graph" in v.tags else _exchange_params(self.world, be, self.exchange_kind,
                                                                             self.bucket_mb))
        say = self._say(v.name)
        if v.backend == "cpu":
            out = train_numpy(layers, init, train, test, batch, self.epochs, hyper, say, self.exch, self.rank,
                              self.ranks, self.cap)
            rec["status"] = "PASS"
            return per_rank(self.world, _record(rec, out, self.cublas_gemm_us)), out
        if be.device is not None and (why := v.arch_problem(be.device)):
            return dict(rec, status="SKIP", error=why), None
        comp = compile_version(be.arch, v) if compiled is None else compiled
        broken = next((c for _, c in comp if isinstance(c, Exception)), None)
        if broken is not None:
            return dict(rec, status="ERROR", error=str(broken)), None
        try:
            gemms = None if "cublas" in v.tags else tune(be, v, comp, layers, init, train, self.sub, hyper)
            dp = dict(exchange=self.exch, rank=self.rank, ranks=self.ranks, bucket_cap=self.cap)
            if self.auto_buckets and "graph" not in v.tags:
                choice = self.choose_buckets(v, comp, gemms)
                dp["bucket_cap"], rec["params"] = choice.cap, choice.label()
            net = open_net(be, v, comp, layers, init, train, batch, hyper, len(test), gemms, **dp)
            self.ref = self.ref if self.ref is not None else reference_weights(init, train, batch, hyper, CHECK_STEPS)
            err = check(net, init, train, hyper, self.ref)
            net = open_net(be, v, comp, layers, init, train, batch, hyper, len(test), gemms, **dp)
        except NnbenchError as e:
            return dict(rec, status="SKIP", error=str(e)), None
        except KernelFault as e:  # a launch or a graph capture failed: this version's row says so
            return dict(rec, status="ERROR", error=f"kernel fault: {e}"), None
        self.rtol = self.rtol or check_tolerance(init, train, batch, hyper, ref=self.ref)  # the same for every version
        # a precision whose sums err more than FP32's (3xTF32's truncating MMA) by that much more
        limit = self.rtol * measure.precision_scale(v.precision, batch)
        rec.update(weights_rel_err=err, weights_rtol=limit, status="PASS" if err <= limit else "FAIL",
                   tiles="sgemm via cupy, TF32 off" if gemms is None else
                   " ".join(f"{role}={g.label}" for role, g in gemms.items()))
        try:
            out = train_gpu(net, v.name, train, test, self.epochs, say, init)
            if audit.enabled(audit.FRESH_BUFFERS):  # the check again on a net of its own, the timed one alive
                again = check(open_net(be, v, comp, layers, init, train, batch, hyper, len(test), gemms, **dp), init,
                              train, hyper, self.ref)
                out.failures.append((audit.FRESH_BUFFERS, again > limit and (
                    f"on buffers at other addresses the weight changes are wrong (error {again:.3g} > {limit:.3g}): "
                    "the version depends on what it has seen")))
        except KernelFault as e:
            return dict(rec, status="ERROR", error=f"kernel fault: {e}"), None
        if net.graph:
            rec["tiles"] += f" · a graph of {net.step(0).nodes} kernels per step"
        return per_rank(self.world, _record(rec, out, self.cublas_gemm_us)), out

    def choose_buckets(self, v: Variant, comp, gemms):
        """The bucket plan for version v from the allreduce curve and v's own backward pass (nnbench/runtime/
        buckets.py); rank 0's choice for every rank, whose plans must match bucket for bucket. PyTorch DDP's
        row then gets the same cap."""
        from nnbench.runtime import buckets
        if self.curve is None:
            self.curve = buckets.allreduce_curve(self.be, self.world, self.exch, flat_size(self.layers))
        net = open_net(self.be, v, comp, self.layers, self.init, self.train, self.batch, self.hyper, gemms=gemms,
                       exchange=self.exch, rank=self.rank, ranks=self.ranks, bucket_cap=0)
        choice = self.world.comm.bcast(buckets.choose(backward_timeline(net), self.curve), root=0)
        self.bucket_mb = choice.mb
        return choice

    def torch(self, mode: str) -> tuple[dict, Outcome | None]:
        """PyTorch's row: eager or graph on one GPU, or (`ddp`, data-parallel runs) DDP over the ranks;
        checked like ours."""
        if mode == "ddp":
            rec = dict(self.base, version="torch-ddp", step="", precision=FFMA)
            return _ddp_row(self.be, self.world, rec, self.layers, self.init, self.train, self.test, self.hyper,
                            self.batch, self.epochs, self.bucket_mb, self.progress, self.rtol, self.cublas_gemm_us,
                            self.ref)
        graphed = ", the step as one CUDA graph" if mode == "graph" else ""
        rec = dict(self.base, version=f"torch-{mode}", step="", precision=FFMA,
                   params="fp32 SGD(momentum), TF32 off" + graphed)
        steps = min(CHECK_STEPS, self.steps_per_epoch)  # checked like ours
        ref = reference_weights(self.init, self.train, self.batch, self.hyper, steps)
        try:
            out = mlp.train_torch(self.layers, self.init, self.train, self.test, self.hyper,
                                  self.epochs * self.steps_per_epoch, graph=(mode == "graph"), batch=self.batch,
                                  check=(steps, ref), time_step=partial(time_torch_step, self.be))
        except ImportError:
            return dict(rec, status="SKIP", error="PyTorch is not installed"), None
        limit = self.rtol or check_tolerance(self.init, self.train, self.batch, self.hyper, steps)
        rec.update(weights_rel_err=out.weights_rel_err, weights_rtol=limit,
                   status="PASS" if out.weights_rel_err <= limit else "FAIL")
        t = _from_torch(out, self.batch, self.steps_per_epoch)
        return _record(rec, t, self.cublas_gemm_us), t


def run(backend, chosen: list[tuple[Variant, dict]], layers: tuple[int, ...], hyper: mlp.Hyper, batch: int,
        epochs: int = DEFAULT_EPOCHS, train_samples: int = DEFAULT_TRAIN_SAMPLES, test_per_letter: int = 10,
        flips: int = 2, torch_modes: tuple[str, ...] = (), progress=None, env: dict | None = None,
        world=None, exchange_kind: str = "nccl", bucket_mb: float | None = None):
    """Yield one record per version (then per PyTorch mode, or PyTorch DDP's one row under `world`),
    each GPU version verified first, with its Outcome in `_outcome`: BatchRun over a list of versions,
    for tests and lab scripts (the command runs the same through the workload's session)."""
    r = BatchRun(backend, layers, hyper, batch, epochs, train_samples, test_per_letter, flips, progress, env, world,
                 exchange_kind, bucket_mb)
    compiled = {v.name: compile_version(backend.arch, v) for v, _ in chosen
                if v.backend != "cpu" and not (backend.device is not None and v.arch_problem(backend.device))}
    for v, _ in sorted(chosen, key=lambda vp: vp[0].step):
        yield mlp.with_outcome(*r.version(v, compiled.get(v.name)))
    for mode in (("ddp",) if torch_modes else ()) if world is not None else torch_modes:
        yield mlp.with_outcome(*r.torch(mode))


def _exchange_params(world, backend, kind: str, bucket_mb: float) -> str:
    """A data-parallel row's params: how its gradients travel."""
    if world is None:
        return ""
    if bucket_mb <= 0 or (backend.runs_kernels and kind != "nccl"):
        return "one allreduce after the backward pass"
    stream = ", on a side stream during the backward pass" if backend.runs_kernels else " (non-blocking MPI)"
    return f"buckets of <= {bucket_mb:g} MB{stream}"


def _ddp_row(backend, world, rec: dict, layers, init, train, test, hyper, batch: int, epochs: int, bucket_mb: float,
             progress, rtol: float | None, cublas_gemm_us: float | None,
             ref: list[np.ndarray] | None) -> tuple[dict, Outcome | None]:
    """PyTorch DDP's row (nnbench/workloads/train/ddp.py), checked and timed as our data-parallel rows; `ref`: the
    float64 reference after CHECK_STEPS steps where our rows made it."""
    from nnbench.workloads.train import ddp
    rec["params"] = ddp.label(bucket_mb)
    if why := ddp.unavailable():
        return dict(rec, status="SKIP", error=why), None
    steps = min(CHECK_STEPS, len(train) // batch)
    if ref is None or steps != CHECK_STEPS:
        ref = reference_weights(init, train, batch, hyper, steps)
    say = (lambda it, err: progress("torch-ddp", it, err)) if progress else None
    out = ddp.train(world, layers, init, train, test, hyper, batch, epochs, (steps, ref),
                    partial(step_time, backend, world, settings=EAGER_TIMING), bucket_mb, Outcome("torch-ddp"),
                    _fixed_epochs, say)
    limit = rtol or check_tolerance(init, train, batch, hyper, steps, ref=ref)
    rec.update(weights_rel_err=out.weights_rel_err, weights_rtol=limit,
               status="PASS" if out.weights_rel_err <= limit else "FAIL")
    return per_rank(world, _record(rec, out, cublas_gemm_us)), out


PER_RANK = ("us_per_step", "kernels_us", "exposed_us", "rest_us")


def per_rank(world, rec: dict) -> dict:
    """Every rank's split of the step into rank 0's row (rank_us_per_step, rank_kernels_us, ...: one value a
    rank, rank order, space-separated): rank 0 times only itself, and the slowest rank sets the step. A
    collective: every rank calls it for the same rows in the same order."""
    if world is None:
        return rec
    mine = [rec.pop("_own_us_per_step", rec.get(k)) if k == "us_per_step" else rec.get(k) for k in PER_RANK]
    every = world.comm.allgather(mine)
    for i, k in enumerate(PER_RANK):
        rec[f"rank_{k}"] = " ".join("" if r[i] is None else f"{r[i]:.1f}" for r in every)
    return rec


def flat_size(layers: tuple[int, ...]) -> int:
    """Floats in the flat gradient buffer that data-parallel ranks allreduce (padded layout)."""
    return sum(n_out * round4(n_in + 1) for n_in, n_out in zip(layers, layers[1:]))


def _cublas_gemms(backend, layers, init, train, batch, hyper) -> float | None:
    """Microseconds per step of the step's GEMMs alone through cuBLAS (the target's yardstick),
    or None without CuPy."""
    try:
        cublas = CublasGemm(backend)
    except NnbenchError:
        return None
    v = registry.find(VARIANTS, "train", "batched-cublas")
    net = open_net(backend, v, compile_version(backend.arch, v), layers, init, train.take(slice(0, batch)), batch,
                   hyper, cublas=cublas)
    launches = net.step_launches(0)
    net.callable(launches)()
    return sum(role_times(backend, [la for la in launches if la.role in GEMM_ROLES]).values())


EAGER_SAMPLE_MS = 10.0  # an eager sample spans several steps back to back, as a training loop runs them
EAGER_TIMING = replace(STEP_TIMING, host_issued=True, min_sample_ms=EAGER_SAMPLE_MS)


def time_torch_step(backend, launch, host_issued: bool) -> measure.Stats:
    """A PyTorch row's steady-state step, timed as ours are (STEP_TIMING). Eager is issued by the host,
    several steps a sample, so that the host's issue of one step overlaps the GPU's tail of the last
    as in a training loop (one step a sample would time each step's tail: latency, not throughput)."""
    return measure.measure(backend, launch, EAGER_TIMING if host_issued else STEP_TIMING)


def _from_torch(out: Outcome, batch: int, steps_per_epoch: int) -> Outcome:
    """A PyTorch row's Outcome (mlp.train_torch's) with the mini-batch rows' epoch count and training time."""
    out.epochs = out.steps // steps_per_epoch
    out.train_seconds = out.seconds_per_step * out.steps
    if out.stats is not None:
        out.timed_by(out.stats)
    return out


def _record(rec: dict, out: Outcome, cublas_gemm_us: float | None) -> dict:
    s = out.seconds_per_step
    gemm = sum(us for role, us in out.role_us.items() if role in GEMM_ROLES) if out.role_us else None
    # the allreduce is comm_us: counted in other_us it made a data-parallel step's "other" look 100+ µs slower
    other = sum(us for role, us in out.role_us.items() if role not in (*GEMM_ROLES, "allreduce")) \
        if out.role_us else None
    kernels = out.kernels_us if out.kernels_us is not None else gemm + other if out.role_us else None
    exposed = s * 1e6 - out.compute_us if out.compute_us is not None and s > 0 else None
    rec.update(
        steps=out.steps, epochs_run=out.epochs, final_error=out.final_error, us_per_step=s * 1e6,
        step_iqr_pct=out.step_iqr_pct, timing=out.timing, samples_per_s=rec["batch"] / s if s > 0 else None,
        tflops=rec["flops_per_step"] / s / 1e12 if s > 0 else None, train_seconds=out.train_seconds,
        gemm_us=gemm, other_us=other, comm_us=out.comm_us, compute_us=out.compute_us,
        exposed_us=exposed, buckets=out.buckets, kernels_us=kernels,
        rest_us=s * 1e6 - kernels - (exposed or 0.0) if kernels is not None and s > 0 else None,
        roles_us=" ".join(f"{k}={v:.1f}" for k, v in out.role_us.items()) or None,
        launches_per_step=out.launches_per_step or None,
        cublas_gemm_us=cublas_gemm_us, vs_cublas_gemms=s * 1e6 / cublas_gemm_us if cublas_gemm_us else None,
        train_accuracy=out.train_accuracy, test_accuracy=out.test_accuracy)
    if out.own_step_us is not None:  # per_rank's, not a column
        rec["_own_us_per_step"] = out.own_step_us
    return rec
