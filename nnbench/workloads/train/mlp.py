"""The character-recognition MLP of the seed's study: the float64 reference, the CPU `sequential`
version, and the GPU versions of kernels_cu/mlp/, trained per sample as in the seed.

The math, for every version (the reference defines it):
  forward   o_l = sigmoid(W_l o_(l-1) + b_l), the bias stored as the last column of W_l
  error     E = 1/2 sum (t - o_L)^2 for one sample
  deltas    d_L = o_L (1 - o_L)(t - o_L);  d_l = o_l (1 - o_l) * (W_(l+1)^T d_(l+1)), with the
            weights as they were before this sample's update (the seed's pseudo-code writes
            `errors + weights` for this product: a typo for the product, fixed here)
  update    v = momentum * v + rate * d_l o_(l-1)^T;  W_l += v   (classic momentum, which is what
            torch.optim.SGD(momentum=m, lr=rate) does to the loss E; the seed's update multiplies
            by the momentum where it means the rate and indexes o_(l-1) by j instead of k: fixed)
Training visits the training set in a fixed order, one sample per iteration, and stops when an
epoch's mean E is at most the tolerance, or at the iteration limit.

Knows nothing about click or rich: the CLI renders what `train` returns and yields.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

import numpy as np

from nnbench import audit, glyphs, measure, registry
from nnbench.errors import KernelFault, NnbenchError
from nnbench.measure import weight_change_error  # noqa: F401 - the trainers' check, here since training has it
from nnbench.nets import INITS
from nnbench.registry import Variant
from nnbench.runtime.compile import compile_sources
from nnbench.runtime.device import FFMA
from nnbench.workloads.train import model
from nnbench.workloads.train.model import deltas, sigmoid  # noqa: F401 - per-sample code calls them by these names
from nnbench.workloads.train.outcome import Outcome
from nnbench.workloads.train.variants import VARIANTS

DEFAULT_RATE, DEFAULT_MOMENTUM, DEFAULT_TOLERANCE = 0.3, 0.8, 1e-5
DEFAULT_MAX_ITERATIONS = 200_000
# Without a GPU and without --max-iterations, per-sample training stops after about this long: the
# nets' own budgets (up to 2,000,000 iterations) take hours in NumPy. The iterations come from a cost
# model (a fixed cost per sample plus one per multiply-add, 2-core EPYC, loaded: Net 1 37 us, Net 5
# 330 us, Net 8 12.3 ms an iteration), not from a clock, so the same command trains the same weights.
CPU_BUDGET_S = 20.0
CPU_S_PER_ITERATION = 30e-6
CPU_S_PER_MAC = 4e-9


@dataclass(frozen=True)
class Hyper:
    rate: float = DEFAULT_RATE
    momentum: float = DEFAULT_MOMENTUM
    tolerance: float = DEFAULT_TOLERANCE
    max_iterations: int = DEFAULT_MAX_ITERATIONS
    seed: int = 0
    init_scale: float = 4.0
    init: str = "glorot"

    @classmethod
    def from_settings(cls, settings: dict, **given) -> Hyper:
        """What the user gave, else the net's setting (configs/nets.yaml), else the default."""
        known = {k: v for k, v in settings.items() if k in cls.__dataclass_fields__}
        return cls(**{**known, **{k: v for k, v in given.items() if v is not None}})

    def check(self) -> None:
        for opt, v in (("--rate", self.rate), ("--momentum", self.momentum), ("--tolerance", self.tolerance),
                       ("--init-scale", self.init_scale)):
            if not math.isfinite(v):
                raise NnbenchError(f"{opt} {v}: must be a finite number")
        if not 0 <= self.seed < 2**32:
            raise NnbenchError(f"--seed {self.seed}: must be in [0, 2**32)")
        if not self.rate > 0:
            raise NnbenchError(f"--rate {self.rate}: the learning rate must be > 0")
        if not 0 <= self.momentum < 1:
            raise NnbenchError(f"--momentum {self.momentum}: must be in [0, 1)")
        if not self.tolerance > 0:
            raise NnbenchError(f"--tolerance {self.tolerance}: must be > 0")
        if not self.init_scale > 0:
            raise NnbenchError(f"--init-scale {self.init_scale}: must be > 0")
        if self.init not in INITS:
            raise NnbenchError(f"--init {self.init}: choose from {', '.join(INITS)}")
        if self.max_iterations < 1:
            raise NnbenchError(f"--max-iterations {self.max_iterations}: must be >= 1")


TEST_SAMPLE_OVERHEAD = 200  # bytes of Python objects per test glyph while glyphs.noisy builds the set


def footprint(layers: tuple[int, ...], batch: int = 1, samples: int = 0, test: int = 0) -> tuple[float, float]:
    """(host bytes, device bytes) a training run needs, estimated before any weight exists. Host:
    the fp64 initial weights, fp64 reference copies with their velocities and gradients for the
    check, and the fp32 working set; device: weights, velocities and gradients in fp32. A batch adds
    its activations and deltas per layer; a training set its inputs and targets; the `test` glyphs
    (glyphs.noisy: 52 letters times --test-per-letter) theirs, built on the host one Python array each."""
    weights = sum((n_in + 1) * n_out for n_in, n_out in zip(layers, layers[1:]))
    acts = batch * sum(layers) * 4 * 3
    data = samples * (layers[0] + layers[-1]) * 4
    tests = test * ((layers[0] + layers[-1]) * 8 + TEST_SAMPLE_OVERHEAD)
    return float(weights * (8 + 3 * 8 + 3 * 4) + acts + data + tests), float(weights * 3 * 4 + acts + data)


# -- the network, in float64 ----------------------------------------------------------------------
def init_params(layers: tuple[int, ...], seed: int, scale: float = 4.0, kind: str = "glorot") -> list[np.ndarray]:
    """Initial weights, biases included (the last column).

    glorot:   uniform in +-scale*sqrt(6/(fan_in+fan_out)); scale 4 is Glorot & Bengio's advice for
              sigmoid units. Deep sigmoid nets forget their input under it: the inputs of a hidden
              layer are sigmoid outputs near 0.5, so every row's sum of weights times 0.5 acts as a
              fixed random bias that drowns the input-dependent part, and after ~10 layers every
              letter maps to the same activations (measured on Net 7: the spread across letters
              falls from 0.24 at layer 1 to 0.000 at layer 12). Nets 7 and 8 then never learn.
    centered: uniform with standard deviation scale/sqrt(fan_in), and each bias set to
              -0.5 * (the row's sum of weights), so a layer's pre-activation has zero mean for inputs
              around 0.5. A sigmoid's slope at 0 is 1/4, so scale 4 keeps the backward signal's size
              from layer to layer (4 * 1/4 = 1), and scale ~5 keeps the letters apart through all
              16 layers. Only the starting point changes: the training math is the seed's."""
    rng = np.random.default_rng(seed)
    out = []
    for n_in, n_out in zip(layers, layers[1:]):
        if kind == "centered":
            r = scale * math.sqrt(3.0 / n_in)
            W = rng.uniform(-r, r, size=(n_out, n_in + 1))
            W[:, -1] = -0.5 * W[:, :-1].sum(axis=1)
        else:
            r = scale * math.sqrt(6.0 / (n_in + n_out))
            W = rng.uniform(-r, r, size=(n_out, n_in + 1))
        out.append(W)
    return out


def forward(params: list[np.ndarray], x: np.ndarray) -> list[np.ndarray]:
    outs = [x]
    for W in params:
        outs.append(sigmoid(W[:, :-1] @ outs[-1] + W[:, -1]))
    return outs


def step(params: list[np.ndarray], vel: list[np.ndarray], x: np.ndarray, t: np.ndarray, rate: float,
         momentum: float, applied: bool = False) -> float:
    """One per-sample backprop iteration, in place; returns the sample's E (before the update). With
    `applied`, the velocity kept is the step really applied, w_new - w (exact by Sterbenz's lemma), not the one
    computed before w's rounding: the recurrence of the fused versions' PREV_W, which keep the previous weights
    instead of the velocities (kernels_cu/mlp/fused_common.cuh), so that each step's rounding of w feeds the
    next steps' momentum."""
    outs = forward(params, x)
    e = t - outs[-1]
    for l, (W, v, d) in enumerate(zip(params, vel, deltas(params, outs, e))):
        v *= momentum
        v[:, :-1] += rate * np.outer(d, outs[l])
        v[:, -1] += rate * d
        before = W.copy() if applied else None
        W += v
        if applied:
            v[...] = W - before
    return 0.5 * float(e @ e)


def step_applied(params, vel, x, t, rate, momentum) -> float:
    """`step` with the applied velocity (PREV_W's recurrence)."""
    return step(params, vel, x, t, rate, momentum, applied=True)


def gradient(params: list[np.ndarray], x: np.ndarray, t: np.ndarray) -> list[np.ndarray]:
    """dE/dW for every layer, by the same backward pass (the gradient check tests this)."""
    outs = forward(params, x)
    return [-np.hstack([np.outer(d, outs[l]), d[:, None]])
            for l, d in enumerate(deltas(params, outs, t - outs[-1]))]


def error(params: list[np.ndarray], x: np.ndarray, t: np.ndarray) -> float:
    e = t - forward(params, x)[-1]
    return 0.5 * float(e @ e)


def accuracy(outputs: np.ndarray, targets: np.ndarray) -> float:
    """Share of samples whose 7 rounded outputs all equal the target bits."""
    return float(np.mean(np.all((outputs >= 0.5) == (targets >= 0.5), axis=1)))


# -- costs, for the report ------------------------------------------------------------------------
def flops_per_iteration(layers: tuple[int, ...]) -> float:
    """Forward 2 per weight; backward 2 per weight of every layer but the first (its input needs
    no delta); update 5 per weight (v = m*v + r*d*o: 3, w += v: 1, the r*d product amortized: 1)."""
    w = [n_out * (n_in + 1) for n_in, n_out in zip(layers, layers[1:])]
    return 2.0 * sum(w) + 2.0 * sum(w[1:]) + 5.0 * sum(w)


def flops_per_feedforward(layers: tuple[int, ...]) -> float:
    return 2.0 * sum(n_out * (n_in + 1) for n_in, n_out in zip(layers, layers[1:]))


# -- versions -------------------------------------------------------------------------------------
def versions(backend: str | None = None) -> list[Variant]:
    """The per-sample versions (the mini-batch ones are nnbench.workloads.train.batched's)."""
    return [v for v in registry.of_workload(VARIANTS, "train", backend) if "batched" not in v.tags]


@dataclass
class Launch:
    """One kernel launch of an iteration, with its work for the efficiency figures."""

    kernel: str
    grid: int
    block: int
    args: tuple
    useful_threads: int  # threads with work (a neuron, or a weight)


class GpuNet:
    """A net's state on the GPU (outputs, deltas, weights, velocities, the data set) and the
    launch sequence of one version. The data are copied once, as in the seed."""

    def __init__(self, backend, variant: Variant, params: dict[str, int], layers: tuple[int, ...],
                 init: list[np.ndarray], data: glyphs.Dataset, hyper: Hyper, compiled) -> None:
        self.be, self.v, self.layers, self.hyper = backend, variant, layers, hyper
        self.kernels = {name: backend.load(compiled, name) for name in self._kernel_names()}
        self.out_off = np.concatenate([[0], np.cumsum(layers[1:])]).astype(int)  # hidden+output only
        self.w_off = np.concatenate([[0], np.cumsum([W.size for W in init])]).astype(int)
        self.d_out = backend.upload(np.zeros(sum(layers[1:]), np.float32))
        self.d_delta = backend.upload(np.zeros(sum(layers[1:]), np.float32))
        self.d_w = backend.upload(np.concatenate([W.ravel() for W in init]).astype(np.float32))
        self.d_v = backend.upload(np.zeros(int(self.w_off[-1]), np.float32))
        self.d_err = backend.upload(np.zeros(1, np.float32))
        self.load_data(data)
        self.threads_per_block = params.get("THREADS") or params.get("MASS_THREADS")

    def _kernel_names(self) -> list[str]:
        update = ["update_merged"] if "kcm" in self.v.tags else ["update_momentum", "update_rate"]
        return ["forward", "delta_output", "delta_hidden", *update]

    def load_data(self, data: glyphs.Dataset) -> None:
        self.n = len(data)
        self.d_x = self.be.upload(np.ascontiguousarray(data.x, dtype=np.float32))
        self.d_t = self.be.upload(np.ascontiguousarray(data.t, dtype=np.float32))

    # pointers
    def _p(self, buf, offset_floats: int) -> np.intp:
        return np.intp(int(buf) + 4 * int(offset_floats))

    def layer_in(self, l: int, sample: int) -> np.intp:
        """The input of layer l (0-based over weight layers): the sample, or the layer before."""
        if l == 0:
            return self._p(self.d_x, sample * self.layers[0])
        return self._p(self.d_out, self.out_off[l - 1])

    def forward_launches(self, sample: int) -> list[Launch]:
        mass = "mass" in self.v.tags
        tpb = self.threads_per_block
        out = []
        for l, (n_in, n_out) in enumerate(zip(self.layers, self.layers[1:])):
            grid, block = (n_out, tpb) if mass else (-(-n_out // tpb), tpb)
            out.append(Launch("forward", grid, block, (self._p(self.d_w, self.w_off[l]), self.layer_in(l, sample),
                                                       self._p(self.d_out, self.out_off[l]), np.int32(n_in),
                                                       np.int32(n_out)), n_out * (tpb if mass else 1)))
        return out

    def step_launches(self, sample: int) -> list[Launch]:
        L, hy = len(self.layers) - 1, self.hyper
        mass, merged = "mass" in self.v.tags, "kcm" in self.v.tags
        tpb = self.threads_per_block
        seq = self.forward_launches(sample)
        n_o = self.layers[-1]
        seq.append(Launch("delta_output", -(-n_o // 32), 32,
                          (self._p(self.d_out, self.out_off[L - 1]), self._p(self.d_t, sample * n_o),
                           self._p(self.d_delta, self.out_off[L - 1]), np.int32(n_o), self.d_err), n_o))
        for l in range(L - 2, -1, -1):  # hidden layer l's outputs feed weight layer l + 1
            n, n_next = self.layers[l + 1], self.layers[l + 2]
            grid, block = (n, tpb) if mass else (-(-n // tpb), tpb)
            seq.append(Launch("delta_hidden", grid, block,
                              (self._p(self.d_out, self.out_off[l]), self._p(self.d_w, self.w_off[l + 1]),
                               self._p(self.d_delta, self.out_off[l + 1]), self._p(self.d_delta, self.out_off[l]),
                               np.int32(n), np.int32(n_next)), n * (tpb if mass else 1)))
        rate, mom = np.float32(hy.rate), np.float32(hy.momentum)
        for l, (n_in, n_out) in enumerate(zip(self.layers, self.layers[1:])):
            weights = n_out * (n_in + 1)
            grid, block = (-(-weights // 256), 256) if mass else (-(-n_out // tpb), tpb)
            useful = weights if mass else n_out
            w, v = self._p(self.d_w, self.w_off[l]), self._p(self.d_v, self.w_off[l])
            d, x = self._p(self.d_delta, self.out_off[l]), self.layer_in(l, sample)
            if merged:
                seq.append(Launch("update_merged", grid, block, (w, v, d, x, np.int32(n_in), np.int32(n_out), rate,
                                                                 mom), useful))
            else:
                seq.append(Launch("update_momentum", grid, block, (w, v, np.int32(n_in), np.int32(n_out), mom),
                                  useful))
                seq.append(Launch("update_rate", grid, block, (w, v, d, x, np.int32(n_in), np.int32(n_out), rate,
                                                               mom), useful))
        return seq

    def callable(self, launches: list[Launch], stream=None):
        """The launches as one call, on the default stream or, async, on `stream`."""
        calls = [self.be.bind(self.kernels[la.kernel], (la.grid, 1, 1), (la.block, 1, 1), la.args,
                              _SIGNATURES[la.kernel], stream=stream) for la in launches]

        def run():
            for call in calls:
                call()
        return run

    def weights(self, init: list[np.ndarray]) -> list[np.ndarray]:
        flat = self.be.download(self.d_w, np.zeros(int(self.w_off[-1]), np.float32))
        return [flat[self.w_off[l]:self.w_off[l + 1]].reshape(W.shape).astype(np.float64)
                for l, W in enumerate(init)]

    def feedforward(self, data: glyphs.Dataset) -> tuple[np.ndarray, float]:
        """Feedforward every sample of `data` (which replaces the training set on the GPU); returns
        the outputs and the device milliseconds, as FusedNet.feedforward does."""
        self.load_data(data)
        outs, ms = [], 0.0
        for s in range(len(data)):
            ms += self.be.timed(self.callable(self.forward_launches(s)), 1)
            outs.append(self.outputs())
        return np.array(outs), ms

    def outputs(self) -> np.ndarray:
        L = len(self.layers) - 1
        all_ = self.be.download(self.d_out, np.zeros(sum(self.layers[1:]), np.float32))
        return all_[self.out_off[L - 1]:].astype(np.float64)

    def poison(self) -> None:
        """NaN in every output and delta, so a neuron that a kernel never writes poisons the weights."""
        for buf in (self.d_out, self.d_delta):
            self.be.fill_nan(buf, sum(self.layers[1:]))

    def epoch_error_reset(self) -> None:
        self.be.write(self.d_err, np.zeros(1, np.float32))

    def epoch_error(self) -> float:
        return float(self.be.download(self.d_err, np.zeros(1, np.float32))[0])


_SIGNATURES = {"forward": "PPPii", "delta_output": "PPPiP", "delta_hidden": "PPPPii", "update_momentum": "PPiif",
               "update_rate": "PPPPiiff", "update_merged": "PPPPiiff"}


def compile_versions(arch: str, chosen: list[tuple[Variant, dict]]) -> dict[str, object]:
    return {v.name: c for (v, _), c in zip(chosen, compile_sources(arch, [(v.source, p) for v, p in chosen]))}


# -- training -------------------------------------------------------------------------------------
def watched_stats(watch: measure.RunWatch, samples_s: list[float]) -> measure.Stats:
    """The timed runs' statistics with NVML's columns, the first run (the warm-up) left out where others
    exist, as train.unify does without a watch; host-issued, as every per-sample run is."""
    stats = watch.stats([1e3 * x for x in samples_s], skip=1 if len(samples_s) > 1 else 0)
    stats.timing = measure.HOST_ISSUED
    return stats


def _epochs(out: Outcome, hyper: Hyper, size: int, run, progress, epochs_per_run: int = 1) -> float:
    """Epochs of `size` samples (the last cut short at the iteration limit) until an epoch's mean
    error is within the tolerance. run(n) trains n samples, up to `epochs_per_run` epochs, and
    returns (seconds, mean error of each epoch run); it may stop early at a converged epoch, which
    the check below then finds too. Returns the seconds."""
    seconds = 0.0
    while out.steps < hyper.max_iterations and not out.converged:
        n = min(size * epochs_per_run, hyper.max_iterations - out.steps)
        spent, errors = run(n)
        seconds += spent
        out.samples_s.append(spent / n)
        for e, err in enumerate(errors):
            record_epoch(out, hyper, size, min(size, n - e * size), err)
            if out.converged:
                break
        if progress:
            progress(out.steps, out.final_error)
    return seconds


def record_epoch(out: Outcome, hyper: Hyper, size: int, done: int, err: float) -> None:
    """An epoch's account: `done` samples of a `size`-sample epoch, with mean error `err`. A last
    epoch cut short at the iteration limit is not the net's error, nor can it converge."""
    out.steps += done
    if done == size or math.isnan(out.final_error):
        out.final_error = err
    out.error_curve.append((out.steps, err))
    out.converged = done == size and converged(err, hyper.tolerance)


def converged(mean_error: float, tolerance: float) -> bool:
    """In float32, as the fused kernel decides it on the GPU."""
    return bool(np.float32(mean_error) <= np.float32(tolerance))


def train_sequential(layers, init, train, test, hyper: Hyper, progress=None) -> Outcome:
    """`sequential`: NumPy float32 on the host, one sample at a time, each layer a BLAS
    matrix-vector product: what a careful Python programmer writes, not a slowed-down loop."""
    params = [W.astype(np.float32) for W in init]
    vel = [np.zeros_like(W) for W in params]
    x, t = train.x.astype(np.float32), train.t.astype(np.float32)
    rate, mom = np.float32(hyper.rate), np.float32(hyper.momentum)
    out = Outcome("sequential")

    def run_epoch(n: int) -> tuple[float, list[float]]:
        t0 = time.perf_counter()
        total = sum(step(params, vel, x[s], t[s], rate, mom) for s in range(n))
        return time.perf_counter() - t0, [total / n]

    busy = _epochs(out, hyper, len(x), run_epoch, progress)
    out.seconds_per_step = busy / out.steps
    t0 = time.perf_counter()
    outs = np.stack([forward(params, xi)[-1] for xi in test.x.astype(np.float32)])
    out.seconds_per_feedforward = (time.perf_counter() - t0) / len(test)
    out.test_outputs = outs.astype(np.float64)
    out.test_accuracy = accuracy(outs, test.t)
    out.train_accuracy = accuracy(np.stack([forward(params, xi)[-1] for xi in x]), train.t)
    out.launches_per_step, out.threads_per_step, out.busy_threads_mean = 0, 1, 1.0
    return out


def train_gpu(backend, variant: Variant, params: dict[str, int], compiled, layers, init, train, test,
              hyper: Hyper, progress=None, fresh=None) -> Outcome:
    """A launch-per-layer version: trained epoch by epoch to the tolerance, scored, then timed (time_block) on
    one epoch of its launches; `fresh()` (the fresh-buffers check) runs while this net is still alive."""
    net = GpuNet(backend, variant, params, layers, init, train, hyper, compiled)
    epoch = [net.callable(net.step_launches(s)) for s in range(len(train))]
    sample_launches = net.step_launches(0)
    out = Outcome(variant.name, launches_per_step=len(sample_launches))
    out.threads_per_step = sum(la.grid * la.block for la in sample_launches)
    out.busy_threads_mean = float(np.mean([la.useful_threads for la in sample_launches]))

    def run_epoch(n: int) -> tuple[float, list[float]]:
        net.epoch_error_reset()
        ms = backend.timed(lambda: [epoch[s]() for s in range(n)], 1)
        return ms * 1e-3, [net.epoch_error() / n]

    out.train_seconds = _epochs(out, hyper, len(epoch), run_epoch, progress)
    score(out, net.feedforward, train, test)  # (which leaves the training set on the device, at a new address)
    block = net.callable([la for s in range(len(train)) for la in net.step_launches(s)])
    time_block(backend, out, block, len(train), audited_block(net, init))
    if fresh is not None:
        out.failures.append((audit.FRESH_BUFFERS, fresh()))
    return out


def fused_net(backend, variant: Variant, params: dict, compiled, layers, init, train, hyper: Hyper,
              blocks: int | None):
    from nnbench.workloads.train import fused
    return fused.FusedNet(backend, backend.load(compiled, "fused_train"), params, layers, init, train, hyper.rate,
                          hyper.momentum, blocks, fused.exchange_of(variant.tags))


def train_fused(backend, variant: Variant, params: dict, compiled, layers, init, train, test, hyper: Hyper,
                progress=None, blocks: int | None = None, fresh=None) -> Outcome:
    """`fused`: trained to the tolerance in launches of up to fused.EPOCHS_PER_LAUNCH epochs of the persistent
    kernel, scored, then timed (time_block) on launches of fused.EPOCHS_PER_LAUNCH whole epochs, as training
    runs them (so the load and store of the weights at each launch's ends are included)."""
    from nnbench.workloads.train import fused
    net = fused_net(backend, variant, params, compiled, layers, init, train, hyper, blocks)
    out = Outcome(variant.name, launches_per_step=1)
    out.threads_per_step = net.blocks * net.threads
    out.busy_threads_mean = float(net.blocks * net.threads)
    out.blocks = net.blocks
    out.train_seconds = _epochs(out, hyper, len(train), lambda n: net.train(n, hyper.tolerance), progress,
                                fused.EPOCHS_PER_LAUNCH)
    score(out, net.feedforward, train, test)
    iterations = fused.EPOCHS_PER_LAUNCH * len(train)
    time_block(backend, out, net.block(iterations), iterations, audited_block(net, init))
    net.check_status()  # the last timed launch's barriers
    if fresh is not None:
        out.failures.append((audit.FRESH_BUFFERS, fresh()))
    return out


# A per-sample GPU version's time per iteration is `measure`d on a block of iterations timed as one sample: an
# epoch of the version's launches (L small launches a sample), or one fused launch of EPOCHS_PER_LAUNCH epochs,
# each sample issued by the host as it goes, as training issues them, so that the launch gaps of a training run
# stay in the figure (a sample queued behind measure's blocking kernel would hide them, as it hides an eager
# PyTorch step's). The median, the spread and the samples are then per iteration (Stats.per). The blocks go on
# training the scored net (after its accuracy is taken) from where it stopped.
BLOCK_TIMING = measure.TimingSettings(budget_s=0.3, min_samples=10, max_noise=0.01, host_issued=True)


def time_block(backend, out: Outcome, block, iterations: int, last=None,
               settings: measure.TimingSettings = BLOCK_TIMING) -> None:
    """`block` (a no-argument callable that runs `iterations` iterations) timed by `measure`, the last timed
    block audited (`last`, audited_block); `out` gets the statistics per iteration and the audit's findings."""
    stats = measure.measure(backend, block, settings, last)
    out.failures += audit.timed_findings(stats)
    out.timed_by(stats.per(iterations))


def audited_block(net, init) -> audit.LastBatch | None:
    """The last timed block of a per-sample net (GpuNet or FusedNet) audited (audit.trained): its outputs and
    deltas poisoned (net.poison) before it, its weights finite and moved after it (Net 8's 1,040 fused
    iterations take seconds in NumPy: no float64 answer for it). The float64 check runs again on fresh buffers
    after timing (PerSampleRun.fresh_check)."""
    if not audit.enabled(audit.TIMED_OUTPUT):
        return None
    return audit.trained(lambda: np.concatenate([W.ravel() for W in net.weights(init)]), net.poison)


def score(out: Outcome, feedforward, train: glyphs.Dataset, test: glyphs.Dataset) -> None:
    """A trained GPU net's test outputs and accuracy, train accuracy and time per feedforward;
    feedforward(data) returns (outputs, device milliseconds for all of data)."""
    out.test_outputs, ms = feedforward(test)
    out.seconds_per_feedforward = ms * 1e-3 / len(test)
    out.test_accuracy = accuracy(out.test_outputs, test.t)
    out.train_accuracy = accuracy(feedforward(train)[0], train.t)


def train_torch(layers, init, train, test, hyper: Hyper, iterations: int, graph: bool, batch: int = 1,
                check: tuple[int, list[np.ndarray]] | None = None, time_step=None,
                watch: measure.RunWatch | None = None) -> Outcome:
    """The same net, data, initial weights and optimizer in PyTorch on the GPU (TF32 off): eager, or
    whole epochs captured as one CUDA graph (the inputs are slices of the training set on the device
    and the error sum is on the device, so nothing of a step runs outside the graph). torch.optim.SGD
    with momentum m and lr r on E follows exactly the trajectory of the update above. With batch > 1
    an iteration is one step over the next `batch` samples on the batch's mean E (the mini-batch
    trainer's math, nnbench/workloads/train/batched.py); the training set's tail short of a batch is unused.

    check = (steps, float64 weights after them): before it is timed, the row runs `steps` steps from
    the initial weights in its own mode and its weight changes are compared with the reference's
    (`weights_rel_err`), as every nnbench version is. Timing: events around each epoch, in steady
    state (the first epoch, which takes the warm-up, is not a sample), whole epochs only; or, with
    time_step(launch, host_issued) -> measure.Stats (the mini-batch rows, whose own steps are timed
    by `measure`), the same as ours: after the epochs (as many as ours: torch_epochs), one step on the
    first batch timed by `measure`, eager issued by the host as it goes (its cost is the host's), the
    graph row one captured step. `watch` (per-sample rows) probes NVML during each timed epoch, and the
    epochs' statistics carry it."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda")
    Ws = [torch.tensor(W[:, :-1], dtype=torch.float32, device=dev, requires_grad=True) for W in init]
    bs = [torch.tensor(W[:, -1], dtype=torch.float32, device=dev, requires_grad=True) for W in init]
    params = [p for pair in zip(Ws, bs) for p in pair]
    opt = torch.optim.SGD(params, lr=hyper.rate, momentum=hyper.momentum)
    X = torch.tensor(train.x, dtype=torch.float32, device=dev)
    T = torch.tensor(train.t, dtype=torch.float32, device=dev)
    steps_per_epoch = len(train) // batch
    sample, forward_t, step_t = torch_program(Ws, bs, opt, X, T, batch)

    def restart() -> None:
        """The initial weights and zero velocities, in place (a captured graph keeps its buffers)."""
        with torch.no_grad():
            for W, b, W0 in zip(Ws, bs, init):
                W.copy_(torch.tensor(W0[:, :-1], dtype=torch.float32))
                b.copy_(torch.tensor(W0[:, -1], dtype=torch.float32))
            for p in params:
                buf = opt.state.get(p, {}).get("momentum_buffer")
                if buf is not None:
                    buf.zero_()

    errors = torch.zeros((), device=dev)

    def eager_epoch(n: int) -> None:
        for s in range(n):
            errors.add_(step_t(*sample(s)))

    out = Outcome("torch-graph" if graph else "torch-eager")
    if graph:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up steps create the momentum buffers before capture
            for s in range(3):
                step_t(*sample(s % steps_per_epoch))
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            eager_epoch(steps_per_epoch)

        def epoch(n: int) -> None:
            if n != steps_per_epoch:
                raise ValueError("a graph row runs whole epochs")
            g.replay()
    else:
        epoch = eager_epoch
    if check is not None:
        steps, ref = check  # at most an epoch
        restart()
        if graph:  # the same steps, captured as the timed epochs are
            checked = torch.cuda.CUDAGraph()
            with torch.cuda.graph(checked):
                eager_epoch(steps)
            checked.replay()
        else:
            eager_epoch(steps)
        torch.cuda.synchronize()
        got = [np.concatenate([W.detach().double().cpu().numpy(), b.detach().double().cpu().numpy()[:, None]], 1)
               for W, b in zip(Ws, bs)]
        out.weights_rel_err = weight_change_error(got, ref, init)
        restart()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    epochs = torch_epochs(iterations, steps_per_epoch, warm_up_epoch=time_step is None)
    during = watch.during if watch is not None else None  # NVML's probe while an epoch runs, or nothing
    for _ in range(epochs):
        errors.zero_()
        start.record()
        epoch(steps_per_epoch)
        end.record()
        if during is not None:
            during()
        end.synchronize()
        out.samples_s.append(start.elapsed_time(end) * 1e-3 / steps_per_epoch)
        out.steps += steps_per_epoch
        out.final_error = float(errors) / steps_per_epoch
        out.error_curve.append((out.steps, out.final_error))
    if time_step is None:
        out.seconds_per_step = float(np.median(out.samples_s[1:]))  # the first epoch is the warm-up
        if watch is not None:
            out.stats = watched_stats(watch, out.samples_s)
    else:  # steady state, after the epochs (these steps go on training on batch 0)
        launch = (lambda: step_t(*sample(0)))
        if graph:
            one = torch.cuda.CUDAGraph()
            with torch.cuda.graph(one):
                step_t(*sample(0))
            launch = one.replay
        torch.cuda.synchronize()
        out.stats = time_step(launch, not graph)
        out.seconds_per_step = out.stats.median_ms * 1e-3
    with torch.no_grad():
        Xt = torch.tensor(test.x, dtype=torch.float32, device=dev)
        start.record()
        outs = [forward_t(Xt[s]) for s in range(len(test))] if batch == 1 else [forward_t(Xt)]
        end.record()
        end.synchronize()
        out.seconds_per_feedforward = start.elapsed_time(end) * 1e-3 / len(test)
        out.test_outputs = torch.cat([o.reshape(-1, len(init[-1])) for o in outs]).double().cpu().numpy()
        out.train_accuracy = accuracy(forward_t(X).cpu().numpy(), train.t)
    out.test_accuracy = accuracy(out.test_outputs, test.t)
    return out


def torch_program(Ws, bs, opt, X, T, batch: int):
    """A PyTorch row's program: `sample(s)`, the s-th sample (a vector) or batch (samples as rows) of
    the training set on the device; `forward_t(x)`; and `step_t(x, t)`, one SGD step on the mean E.
    Shared with lab/scripts/independent_baselines.py, which times this very step with nnbench's timer
    beside its own loop."""
    import torch
    import torch.nn.functional as F

    def sample(s):
        return (X[s], T[s]) if batch == 1 else (X[s * batch:(s + 1) * batch], T[s * batch:(s + 1) * batch])

    def forward_t(x):
        o = x
        for W, b in zip(Ws, bs):
            o = torch.sigmoid(F.linear(o, W, b))
        return o

    def step_t(x, t):
        opt.zero_grad(set_to_none=False)
        loss = 0.5 * ((t - forward_t(x)) ** 2).sum() / batch
        loss.backward()
        opt.step()
        return loss.detach()
    return sample, forward_t, step_t


def torch_epochs(iterations: int, steps_per_epoch: int, warm_up_epoch: bool) -> int:
    """Whole epochs for a PyTorch row to train at least `iterations` steps: as many as ours when its
    step is timed by `measure` (which warms up on its own), at least two when its epochs are the
    samples (the first, which takes the warm-up, is not one)."""
    epochs = -(-iterations // steps_per_epoch)
    return max(2, epochs) if warm_up_epoch else epochs


# -- the command's whole job ----------------------------------------------------------------------
CHECK_ITERATIONS = 20
# The check's limit is derived per run from the arithmetic (check_tolerance): CHECK_FACTOR (measure.py says
# why 10) times the error that float32 itself makes on this net, these settings and these samples, measured
# by running the reference's math in float32 in two summation orders.
CHECK_FACTOR = measure.CHECK_FACTOR


def check_tolerance(init, data: glyphs.Dataset, hyper: Hyper, iterations: int = CHECK_ITERATIONS,
                    ref: list[np.ndarray] | None = None, stepper=None) -> float:
    """The limit on weight_change_error for this check: CHECK_FACTOR x the float32 arithmetic's own
    error on it (the larger of the two summation orders); `stepper`: the version's own recurrence
    (step_applied for PREV_W), where it rounds otherwise than `step`."""
    ref = reference_weights(init, data, hyper, iterations) if ref is None else ref
    return CHECK_FACTOR * max(weight_change_error(float32_weights(init, data, hyper, iterations, reverse=r,
                                                                  stepper=stepper), ref, init)
                              for r in (False, True))


def keeps_previous_weights(params: dict) -> bool:
    """Whether a fused version's build keeps the previous weights instead of the velocities (PREV_W)."""
    return bool(int(params.get("PREV_W", 0)))


def check_version(backend, variant: Variant, params: dict, compiled, layers, init, train, hyper: Hyper,
                  blocks: int | None = None, ref: list[np.ndarray] | None = None) -> float:
    """Relative error of the weight *changes* after CHECK_ITERATIONS samples against the float64
    reference (the weights themselves barely move, so comparing them would hide a wrong update).
    Outputs and deltas start as NaN, so a neuron a kernel never writes poisons the result."""
    if "fused" in variant.tags:
        net = fused_net(backend, variant, params, compiled, layers, init, train, hyper, blocks)
        net.poison()
        net.train(CHECK_ITERATIONS, -1.0)
    else:
        net = GpuNet(backend, variant, params, layers, init, train, hyper, compiled)
        net.poison()
        for s in range(CHECK_ITERATIONS):
            net.callable(net.step_launches(s % len(train)))()
    backend.synchronize()
    got = net.weights(init)
    ref = reference_weights(init, train, hyper, CHECK_ITERATIONS) if ref is None else ref
    return weight_change_error(got, ref, init)


def reference_weights(init, data: glyphs.Dataset, hyper: Hyper, iterations: int) -> list[np.ndarray]:
    """The float64 reference's weights after `iterations` samples from `init`, in order (the training
    set again from its start after its last sample): the mini-batch math at batches of one."""
    return model.reference_weights(init, data, 1, hyper, iterations)


def float32_weights(init, data: glyphs.Dataset, hyper: Hyper, iterations: int, reverse: bool = False,
                    stepper=None) -> list[np.ndarray]:
    """reference_weights' math in float32 (the `sequential` version's arithmetic): the error the
    float32 arithmetic alone makes, which the check's tolerance is derived from. With `reverse`,
    the neurons of the input and hidden layers are taken in reverse order, so every sum runs the
    other way: the same math rounded differently, as a GPU kernel's own order rounds it.
    `stepper` replaces `step` (a test plants a defect in it)."""
    perms = neuron_orders(tuple(W.shape[1] - 1 for W in init) + (init[-1].shape[0],), reverse)
    params = [W.astype(np.float32) for W in permute(init, perms)]
    vel = [np.zeros_like(W) for W in params]
    x, t = data.x[:, perms[0]].astype(np.float32), data.t.astype(np.float32)
    rate, mom = np.float32(hyper.rate), np.float32(hyper.momentum)
    stepper = stepper or step
    for s in range(iterations):
        stepper(params, vel, x[s % len(data)], t[s % len(data)], rate, mom)
    return permute([W.astype(np.float64) for W in params], perms, inverse=True)


def neuron_orders(layers: tuple[int, ...], reverse: bool) -> list[np.ndarray]:
    """Each layer's neuron order: reversed for the input and hidden layers when `reverse`; the
    output layer's order is the targets' and never changes."""
    return [np.arange(n)[::-1] if reverse and i < len(layers) - 1 else np.arange(n) for i, n in enumerate(layers)]


def permute(params: list[np.ndarray], perms: list[np.ndarray], inverse: bool = False) -> list[np.ndarray]:
    """Weights (bias column last) with layer l's neurons in the order perms[l], or back."""
    out = []
    for l, W in enumerate(params):
        rows, cols = perms[l + 1], np.append(perms[l], W.shape[1] - 1)
        if inverse:
            back = np.empty_like(W)
            back[np.ix_(rows, cols)] = W
            out.append(back)
        else:
            out.append(W[np.ix_(rows, cols)])
    return out


def default_version(backend, layers: tuple[int, ...]) -> str:
    """The fastest version that can run: fused where the net's rows fit in the shared memory of one
    block per SM (every net measured on the H100, docs/RESULTS.md), else kcm-mass; sequential
    without a GPU."""
    dev = getattr(backend, "device", None)
    if dev is None:
        return "sequential"
    from nnbench.workloads.train import fused
    out_local = registry.find(VARIANTS, "train", "fused").defaults().get("OUT_LOCAL") == 1
    return "fused" if fused.fits_on_chip(dev, layers, out_local=out_local) else "kcm-mass"


def cpu_default_iterations(layers: tuple[int, ...]) -> int:
    """The iterations the sequential NumPy version trains in about CPU_BUDGET_S (whole epochs of 52)."""
    from nnbench.nets import Net
    per = CPU_S_PER_ITERATION + CPU_S_PER_MAC * Net("", tuple(layers)).feedforward_macs
    return max(52, int(CPU_BUDGET_S / per) // 52 * 52)


def plan(names: list[str], backend: str, pool: list[Variant] | None = None) -> list[tuple[Variant, dict]]:
    all_ = {v.name: v for v in (versions() if pool is None else pool)}
    cpu = ", ".join(v.name for v in all_.values() if v.backend == "cpu")
    out = []
    for name in names:
        if name not in all_:
            raise NnbenchError(f"--variant {name}: unknown; choose from {', '.join(all_)}")
        v = all_[name]
        if v.backend != backend and v.backend != "cpu":
            raise NnbenchError(f"--variant {name}: needs a GPU; the {backend} backend runs: {cpu}")
        out.append((v, v.defaults()))
    return out


class PerSampleRun:
    """One net's per-sample training, made once for all its versions: the initial weights, the
    training and test sets, the float64 reference after the check's iterations and the check's limit
    (both on first use), and the sequential version's time per iteration that the speedups are over.
    `version` and `torch` each train one row and return (record, Outcome); nnbench/workloads/train/session.py
    runs one per case, `run` all of a command's versions.

    Timing: a GPU version's time per iteration is `measure`d (time_block) on a block of training as the training
    runs it, an epoch of its launches or a fused launch of fused.EPOCHS_PER_LAUNCH epochs, issued by the host as
    it goes, so that the figure is what training costs per sample, launch gaps included (which a queued repeat
    of one sample's launches would not time); the sequential version's is its epochs' host clock."""

    def __init__(self, backend, layers: tuple[int, ...], hyper: Hyper, test_per_letter: int = 10, flips: int = 2,
                 torch_iterations: int = 2000, baseline_iterations: int = 104, env: dict | None = None,
                 blocks: int | None = None, progress=None) -> None:
        self.be, self.layers, self.hyper, self.blocks, self.progress = backend, layers, hyper, blocks, progress
        self.torch_iterations, self.baseline_iterations = torch_iterations, baseline_iterations
        self.init, self.train, self.test = data_sets(layers, hyper, test_per_letter, flips)
        self.base = dict(base_record(layers, hyper, self.test), **(env or {}))
        self.seq_s: float | None = None  # the sequential version's seconds per iteration, once known
        self._ref: list[np.ndarray] | None = None
        self._rtol: float | None = None
        self._rtol_applied: float | None = None  # limit()'s for PREV_W builds, once asked
        dev = getattr(backend, "device", None)
        self.peak = getattr(dev, "fp32_peak_flops", None)
        self.lanes = None
        if dev is not None:
            from nnbench.runtime.device import fp32_lanes_per_sm
            self.lanes = dev.sm_count * fp32_lanes_per_sm(dev.cc)

    @property
    def ref(self) -> list[np.ndarray]:
        """The float64 reference's weights after the check's iterations: made once, for every row's check."""
        if self._ref is None:
            self._ref = reference_weights(self.init, self.train, self.hyper, CHECK_ITERATIONS)
        return self._ref

    @property
    def rtol(self) -> float:
        if self._rtol is None:
            self._rtol = check_tolerance(self.init, self.train, self.hyper, ref=self.ref)
        return self._rtol

    def limit(self, params: dict) -> float:
        """A version's limit: `rtol`, or for a PREV_W build the larger of it and CHECK_FACTOR x the error of
        float32 in PREV_W's recurrence. That recurrence carries each step's rounding of w into the next steps'
        momentum: in float32 it errs about 3.5x the kept-velocity recurrence on Net 1, as the fused version
        did on the GPU (0.07 to 0.40 of `rtol` over 86 soak seeds on an H200, once 1.26: a false FAIL, seed
        3810644240), where the other per-sample versions read at most 0.33 of it (docs/VERIFICATION.md)."""
        if not keeps_previous_weights(params):
            return self.rtol
        if self._rtol_applied is None:
            self._rtol_applied = max(self.rtol, check_tolerance(self.init, self.train, self.hyper, ref=self.ref,
                                                                stepper=step_applied))
        return self._rtol_applied

    def sequential_seconds(self) -> float:
        """Seconds per iteration of the sequential version: its own run's where it ran, else a short run
        of baseline_iterations (the speedups need it)."""
        if self.seq_s is None:
            quick = replace(self.hyper, max_iterations=self.baseline_iterations)
            self.seq_s = train_sequential(self.layers, self.init, self.train, self.test, quick).seconds_per_step
        return self.seq_s

    def _say(self, name: str):
        return (lambda it, err: self.progress(name, it, err)) if self.progress else None

    def version(self, v: Variant, p: dict, compiled=None) -> tuple[dict, Outcome | None]:
        """Version v at parameters p, verified (GPU versions: outputs poisoned) and then trained; `compiled`:
        its module where the caller compiled it (else compiled here, from the cache)."""
        rec = dict(self.base, version=v.name, step=v.step, precision=v.precision,
                   params=" ".join(f"{k}={x}" for k, x in p.items()))
        hyper, layers, init, train, test = self.hyper, self.layers, self.init, self.train, self.test
        say = self._say(v.name)
        if v.backend == "cpu":
            out = train_sequential(layers, init, train, test, hyper, say)
            self.seq_s = out.seconds_per_step
            rec["status"] = "PASS"
            return train_record(rec, out, self.seq_s, self.peak, self.lanes), out
        comp = compile_versions(self.be.arch, [(v, p)])[v.name] if compiled is None else compiled
        if isinstance(comp, Exception):
            return dict(rec, status="ERROR", error=str(comp)), None
        try:
            err, limit = check_version(self.be, v, p, comp, layers, init, train, hyper, self.blocks, self.ref), \
                self.limit(p)
            rec.update(weights_rel_err=err, weights_rtol=limit, status="PASS" if err <= limit else "FAIL")
            fresh = (lambda: self.fresh_check(v, p, comp)) if audit.enabled(audit.FRESH_BUFFERS) else None
            if "fused" in v.tags:
                out = train_fused(self.be, v, p, comp, layers, init, train, test, hyper, say, self.blocks, fresh)
                rec["params"] += f" blocks={out.blocks}"
            else:
                out = train_gpu(self.be, v, p, comp, layers, init, train, test, hyper, say, fresh)
        except NnbenchError as e:  # fused refuses a grid it cannot make co-resident
            return dict(rec, status="SKIP", error=str(e)), None
        except KernelFault as e:  # the rows already made stand
            return dict(rec, status="ERROR", error=str(e)), None
        return train_record(rec, out, self.sequential_seconds(), self.peak, self.lanes), out

    def fresh_check(self, v: Variant, p: dict, compiled) -> str | None:
        """The float64 check again, after timing, on a net of its own (allocated while the timed one is alive, so
        at other addresses): a version that keys its work on buffers it has seen fails here (nnbench/audit.py)."""
        err = check_version(self.be, v, p, compiled, self.layers, self.init, self.train, self.hyper, self.blocks,
                            self.ref)
        limit = self.limit(p)
        return None if err <= limit else (f"on buffers at other addresses the weight changes are wrong (error "
                                          f"{err:.3g} > {limit:.3g}): the version depends on what it has seen")

    def torch(self, mode: str) -> tuple[dict, Outcome | None]:
        """PyTorch's row in `mode` (eager or graph), checked like ours (CHECK_ITERATIONS, the same limit)."""
        graphed = ", whole epochs as one CUDA graph" if mode == "graph" else ""
        rec = dict(self.base, version=f"torch-{mode}", step="", precision=FFMA,
                   params="fp32 SGD(momentum), TF32 off" + graphed)
        try:
            out = train_torch(self.layers, self.init, self.train, self.test, self.hyper, self.torch_iterations,
                              graph=(mode == "graph"), check=(CHECK_ITERATIONS, self.ref),
                              watch=measure.RunWatch(self.be))
        except ImportError:
            return dict(rec, status="SKIP", error="PyTorch is not installed"), None
        rec.update(weights_rel_err=out.weights_rel_err, weights_rtol=self.rtol,
                   status="PASS" if out.weights_rel_err <= self.rtol else "FAIL")
        return train_record(rec, out, self.sequential_seconds(), self.peak, self.lanes), out


def with_outcome(rec: dict, out) -> dict:
    """A row with its trainer's Outcome in `_outcome`, for callers of `run` that read the trained state
    (tests, lab scripts); the workload's session reads the Outcome directly and records carry none."""
    return dict(rec, _outcome=out) if out is not None else rec


def run(backend, chosen: list[tuple[Variant, dict]], layers: tuple[int, ...], hyper: Hyper, test_per_letter: int = 10,
        flips: int = 2, torch_modes: tuple[str, ...] = (), torch_iterations: int = 2000,
        baseline_iterations: int = 104, progress=None, env: dict | None = None, blocks: int | None = None):
    """Yield one record per version (then per PyTorch mode), each verified before it is trained, with
    its Outcome in `_outcome`: PerSampleRun over a list of versions, for tests and lab scripts (the
    command runs the same through the workload's session)."""
    r = PerSampleRun(backend, layers, hyper, test_per_letter, flips, torch_iterations, baseline_iterations, env,
                     blocks, progress)
    gpu = [(v, p) for v, p in chosen if v.backend != "cpu"]
    compiled = compile_versions(backend.arch, gpu) if gpu else {}
    if not any(v.backend == "cpu" for v, _ in chosen):  # the speedup needs the sequential time per iteration
        r.sequential_seconds()
    for v, p in sorted(chosen, key=lambda vp: vp[0].step):
        yield with_outcome(*r.version(v, p, compiled.get(v.name)))
    for mode in torch_modes:
        yield with_outcome(*r.torch(mode))


def data_sets(layers: tuple[int, ...], hyper: Hyper, test_per_letter: int = 10,
              flips: int = 2) -> tuple[list[np.ndarray], glyphs.Dataset, glyphs.Dataset]:
    """A run's initial weights, its training set (the 52 clean letters) and its held-out noisy
    test set, all from the hyperparameters' seed."""
    train = glyphs.clean(layers[0])
    test = glyphs.noisy(layers[0], test_per_letter, seed=hyper.seed + 1, flips=flips)
    return init_params(layers, hyper.seed, hyper.init_scale, hyper.init), train, test


def base_record(layers: tuple[int, ...], hyper: Hyper, test: glyphs.Dataset) -> dict:
    """The fields every row of a run shares: the net and its training settings."""
    return dict(workload="train", layers="-".join(map(str, layers)), encoding=layers[0], init=hyper.init,
                init_scale=hyper.init_scale, rate=hyper.rate, momentum=hyper.momentum, tolerance=hyper.tolerance,
                max_iterations=hyper.max_iterations, seed=hyper.seed, test_samples=len(test),
                flops_per_iteration=flops_per_iteration(layers))


def train_record(rec: dict, out: Outcome, seq_s: float | None, peak: float | None, lanes: int | None) -> dict:
    """A version's row: base_record's fields in rec, with the outcome's counts, times and rates."""
    speedup = seq_s / out.seconds_per_step if seq_s and out.seconds_per_step > 0 else None
    threads_per_launch = out.threads_per_step / out.launches_per_step if out.launches_per_step else None
    busy = min(out.busy_threads_mean, lanes) if lanes and out.launches_per_step else None
    gflops = rec["flops_per_iteration"] / out.seconds_per_step / 1e9 if out.seconds_per_step > 0 else None
    rec.update(
        iterations=out.steps, converged=out.converged, final_error=out.final_error,
        us_per_iteration=out.seconds_per_step * 1e6, us_per_feedforward=out.seconds_per_feedforward * 1e6,
        speedup_vs_sequential=speedup, train_accuracy=out.train_accuracy, test_accuracy=out.test_accuracy,
        launches_per_iteration=out.launches_per_step or None, threads_per_launch=threads_per_launch,
        busy_threads=busy, speedup_per_thread=speedup / threads_per_launch if speedup and threads_per_launch else None,
        speedup_per_busy_core=speedup / busy if speedup and busy else None, gflops=gflops,
        pct_peak=100 * gflops * 1e9 / peak if gflops and peak else None)
    return rec
