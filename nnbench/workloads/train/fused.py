"""The host side of the persistent per-sample trainers, `fused-barrier` (kernels_cu/mlp/07_fused.cu),
`fused-partials` (08_fused_tagged.cu) and `fused` (09_fused_columns.cu): which block owns which
rows, how much shared memory that takes, how many phases and barriers an iteration costs, whether
the grid can be co-resident, and the launches.

The three differ in how the blocks exchange what the next phase needs (EXCHANGES): at grid
barriers, with deltas summed by atomics; as tagged values, with deltas as per-block partial sums;
as tagged values, with the deltas themselves broadcast and each block holding the columns of the
weights it needs for them.

Co-residency. A grid barrier deadlocks unless every block of the grid is running at once, and
PyCUDA has no cooperative launch (cuLaunchCooperativeKernel), which would have the driver check
that. So the host checks it: the grid is refused unless it is at most SMs x (blocks per SM that
the occupancy calculation allows for this kernel's registers, threads and shared memory). The
launch goes to the legacy default stream, which waits for all other work of this context, so no
kernel of ours holds an SM when it starts. Another process on the same GPU (MPS) could still hold
SMs; then a barrier waits past its timeout, the kernel stops, and the host raises an error.
"""

from __future__ import annotations

import numpy as np

from nnbench import glyphs
from nnbench.errors import KernelFault, NnbenchError
from nnbench.runtime.device import DeviceInfo, occupancy

MAX_LAYERS = 32  # weight layers the kernels' plan holds (fused_common.cuh)
SIGNATURE = "PiPPiiiPPPPPfPPPPffqIP"
PHASE_WORDS = 4 * MAX_LAYERS + 2  # the PHASE_TIMES build's sums (fused_common.cuh's PhaseTimer)
BARRIER_TIMEOUT_NS = 1_000_000_000
EPOCHS_PER_LAUNCH = 20
EXCHANGES = ("barrier", "partials", "columns")


def exchange_of(tags: tuple[str, ...]) -> str:
    """A fused variant's exchange, from its registry tags."""
    return "columns" if "columns" in tags else "partials" if "tagged" in tags else "barrier"


def output_in_every_block(layers: tuple[int, ...], out_local: bool) -> bool:
    """Whether fused's OUT_LOCAL takes effect: every block holds the output layer, on nets of two
    weight layers or more (fused_common.cuh, out_local)."""
    return out_local and len(layers) >= 3


def phases_per_iteration(layers: tuple[int, ...], out_local: bool = False) -> int:
    """Dependent exchanges between blocks in one training iteration of a net with L = len(layers) - 1
    weight layers: one after every forward layer but the output layer, one after every backward
    layer but the first (07_fused.cu says why). Net 8: 28, against 2L + 1 = 31 naive phases. With
    the output layer in every block (fused's OUT_LOCAL), its deltas and those of the layer below
    are computed where they are needed: two backward exchanges fewer (Net 8: 26)."""
    L = len(layers) - 1
    return L - 1 + (max(L - 3, 0) if output_in_every_block(layers, out_local) else L - 1)


def barriers_per_iteration(layers: tuple[int, ...], exchange: str = "barrier") -> int:
    """Grid barriers in one training iteration: one per phase for fused-barrier, none for the
    tagged exchanges. Epoch boundaries add one per epoch to all."""
    return phases_per_iteration(layers) if exchange == "barrier" else 0


def rows_per_block(layers: tuple[int, ...], blocks: int, out_local: bool = False) -> np.ndarray:
    """rows[l, b]: how many rows (neurons) of weight layer l block b owns: a run of n/G or n/G + 1
    rows, block b's run being run number (b - 4l) mod G, as in the kernels (fused_common.cuh);
    with out_local (and two layers or more) every block holds the whole output layer."""
    out = np.zeros((len(layers) - 1, blocks), dtype=np.int64)
    for l, n_out in enumerate(layers[1:]):
        v = (np.arange(blocks) - 4 * l) % blocks
        out[l] = (v + 1) * n_out // blocks - v * n_out // blocks
    if output_in_every_block(layers, out_local):
        out[-1] = layers[-1]
    return out


def exchange_words(layers: tuple[int, ...], blocks: int, exchange: str) -> int:
    """4-byte words of the kernel's `acc` buffer: fused-barrier's delta sums (every layer's outputs,
    padded to 4); fused-partials' tagged partial sums (for every weight layer but the first, a slot
    per block of its input width, padded to 4); fused's tagged deltas (laid out as the outputs),
    then the transposed weights and velocities of every weight layer but the first."""
    outs = sum(_pad4(n) for n in layers[1:])
    if exchange == "barrier":
        return outs
    if exchange == "partials":
        return 2 * blocks * sum(_pad4(n) for n in layers[1:-1])
    return 2 * outs + 2 * transposed_weights(layers)


def transposed_weights(layers: tuple[int, ...]) -> int:
    """Weights of every layer but the first, without biases: what fused keeps a second time, as
    columns (n_in rows of n_out padded to 4, so that each is 16-byte aligned)."""
    return sum(a * _pad4(b) for a, b in zip(layers[1:-1], layers[2:]))


def _pad4(n: int) -> int:
    return (n + 3) // 4 * 4


def smem_bytes(layers: tuple[int, ...], blocks: int, exchange: str = "barrier", out_local: bool = False) -> int:
    """Dynamic shared memory per block: its rows' weights and velocities (rows padded to 4 floats);
    for fused-barrier one staged input vector with the bias input and its rows' deltas; for the
    tagged exchanges every layer's input, its rows' outputs and deltas of every layer, and room for
    the backward: fused-partials' partial sums of one phase (its rows x G), fused's whole delta
    vector of one layer, padded to 4 and aligned to 16 bytes. The block with the most rows sets
    it."""
    rows = rows_per_block(layers, blocks, out_local)
    stride = np.array([_pad4(n_in + 1) for n_in in layers[:-1]])[:, None]
    weights = 2 * (rows * stride).sum(axis=0)
    if exchange == "barrier":
        floats = weights + int(stride.max()) + rows.max(axis=0)
    else:
        room = (int(rows[:-1].max(initial=0)) * blocks if exchange == "partials"
                else max((_pad4(n) for n in layers[2:]), default=0) + 3)  # + 3: aligned to 16 bytes
        floats = weights + int(stride.sum()) + 2 * rows.sum(axis=0) + room
    return int(4 * floats.max())


STATIC_SMEM_ALLOWANCE = 2560  # the kernels' static shared memory (the layer plan: 2,064 bytes for fused, sm_90)


def default_blocks(dev: DeviceInfo, layers: tuple[int, ...]) -> int:
    """One block per SM, and never more blocks than the widest layer has rows."""
    return min(dev.sm_count, max(layers[1:]))


def fits_on_chip(dev: DeviceInfo, layers: tuple[int, ...], exchange: str = "columns", out_local: bool = False) -> bool:
    """Whether the default grid holds the net's rows in shared memory (before compiling)."""
    need = smem_bytes(layers, default_blocks(dev, layers), exchange, out_local) + STATIC_SMEM_ALLOWANCE
    return len(layers) - 1 <= MAX_LAYERS and need <= dev.smem_per_block_optin


def grid(dev: DeviceInfo, registers: int, static_smem: int, threads: int, layers: tuple[int, ...],
         blocks: int | None, flag_barrier: bool = False, exchange: str = "barrier",
         out_local: bool = False) -> tuple[int, int]:
    """(blocks, dynamic shared-memory bytes) for the launch, or a one-line refusal. The default is
    default_blocks, at most `threads` with the flag barrier."""
    g = blocks or min(default_blocks(dev, layers), threads if flag_barrier else dev.sm_count)
    if flag_barrier and g > threads:
        raise NnbenchError(f"--blocks {g}: the barrier polls one block's flag per thread, so fused with "
                           f"THREADS={threads} runs at most {threads} blocks")
    if len(layers) - 1 > MAX_LAYERS:
        raise NnbenchError(f"fused runs nets of at most {MAX_LAYERS} weight layers; this one has {len(layers) - 1}")
    dyn = smem_bytes(layers, g, exchange, out_local)
    if static_smem + dyn > dev.smem_per_block_optin:
        raise NnbenchError(
            f"fused keeps each block's weight rows on chip: {g} blocks need {(static_smem + dyn) / 1024:.0f} KiB of "
            f"shared memory per block, the device allows {dev.smem_per_block_optin / 1024:.0f} KiB; use more blocks "
            f"(--blocks) or another version")
    occ = occupancy(dev, threads, registers, static_smem + dyn)
    resident = dev.sm_count * occ.blocks_per_sm
    if g > resident:
        raise NnbenchError(
            f"--blocks {g}: the blocks wait for each other, so every block must be resident at once, and this device "
            f"holds {resident} "
            f"blocks of this kernel ({dev.sm_count} SMs x {occ.blocks_per_sm}, limited by {occ.limiter}); "
            f"use --blocks <= {resident}")
    return g, dyn


class FusedNet:
    """A net's weights, velocities, activations and data on the GPU, trained by the persistent
    kernel in launches of up to EPOCHS_PER_LAUNCH epochs."""

    def __init__(self, backend, kernel, params: dict[str, int], layers: tuple[int, ...], init: list[np.ndarray],
                 data: glyphs.Dataset, rate: float, momentum: float, blocks: int | None = None,
                 exchange: str = "barrier") -> None:
        self.be, self.layers, self.threads, self.exchange = backend, layers, params["THREADS"], exchange
        self.tagged = exchange != "barrier"
        self.flag_barrier = params.get("BARRIER") == 1
        # PREV_W: fused's columns swap buffers every step, so where they are now depends on the
        # parity of the last training launch (a launch starts them in the first, from the rows)
        self.prev_w, self.columns_swapped = params.get("PREV_W") == 1, False
        # OUT_LOCAL: the output layer in every block, its columns neither kept nor exchanged
        self.out_local = output_in_every_block(layers, params.get("OUT_LOCAL") == 1)
        info = kernel.info
        self.blocks, self.dyn = grid(backend.device, info.registers, info.smem_bytes, self.threads, layers, blocks,
                                     self.flag_barrier, exchange, self.out_local)
        self.kernel = kernel
        backend.allow_dynamic_smem(kernel, self.dyn)
        self.w_sizes = [W.size for W in init]
        self.d_widths = backend.upload(np.array(layers, dtype=np.int32))
        flat = np.concatenate([W.ravel() for W in init]).astype(np.float32)
        self.d_w = backend.upload(flat)
        # beside each weight its velocity (0), or with PREV_W its value a step before (itself)
        self.d_v = backend.upload(flat if self.prev_w else np.zeros_like(flat))
        # every layer's outputs, slices padded to 4 (16-byte aligned): floats, or tagged values (8
        # bytes); and the exchange's buffer
        outs = sum(_pad4(n) for n in layers[1:])
        self.out_words = 2 * outs if self.tagged else outs
        self.acc_words = exchange_words(layers, self.blocks, exchange)
        self.tagged_acc_words = 2 * outs if exchange == "columns" else self.acc_words  # its tagged head
        self.d_out = backend.upload(np.zeros(self.out_words, np.float32))
        self.d_acc = backend.upload(np.zeros(self.acc_words, np.float32))
        self.tag0 = 1  # the first tag of the next launch; 0, what the buffers hold, is never awaited
        self.d_phase = backend.upload(np.zeros(PHASE_WORDS, np.int64))
        self.d_bar = backend.upload(np.zeros(self.blocks + 2, np.uint32))  # barrier flags, status, done
        self.d_err = backend.upload(np.zeros(EPOCHS_PER_LAUNCH + 1, np.float32))
        self.rate, self.momentum = np.float32(rate), np.float32(momentum)
        self.load_data(data)

    def load_data(self, data: glyphs.Dataset) -> None:
        self.n = len(data)
        self.d_x = self.be.upload(np.ascontiguousarray(data.x, dtype=np.float32))
        self.d_t = self.be.upload(np.ascontiguousarray(data.t, dtype=np.float32))
        self.d_pred = self.be.upload(np.zeros(len(data) * self.layers[-1], np.float32))

    def _launch(self, iterations: int, mode: int, tolerance: float, during=None) -> tuple[float, int, np.ndarray]:
        """Milliseconds (CUDA events), iterations run, and each epoch's summed error; `during()` (an NVML
        probe) runs while the kernel does."""
        be = self.be
        be.write(self.d_err, np.zeros(EPOCHS_PER_LAUNCH + 1, np.float32))
        ms = be.timed(lambda: self._start(iterations, mode, tolerance), 1, during)
        done = self.check_status()
        self.tag0 += done + 1
        self.columns_swapped = self.prev_w and mode == 0 and done % 2 == 1
        return ms, done, be.download(self.d_err, np.zeros(EPOCHS_PER_LAUNCH + 1, np.float32))

    def _start(self, iterations: int, mode: int, tolerance: float) -> None:
        """Queue one launch (its barrier flags reset first), reading nothing back."""
        be, g = self.be, self.blocks
        be.write(self.d_bar, np.zeros(g + 2, np.uint32))
        p = be.ptr(self.d_bar)
        args = (self.d_widths, np.int32(len(self.layers)), self.d_x, self.d_t, np.int32(self.n),
                np.int32(iterations), np.int32(mode), self.d_w, self.d_v, self.d_out, self.d_acc, self.d_err,
                np.float32(tolerance), self.d_pred, np.intp(p), np.intp(p + 4 * g), np.intp(p + 4 * g + 4), self.rate,
                self.momentum, np.int64(BARRIER_TIMEOUT_NS), np.uint32(self.tag0), self.d_phase)
        be.launch(self.kernel, (g, 1, 1), (self.threads, 1, 1), args, SIGNATURE, smem=self.dyn)

    def check_status(self) -> int:
        """The iterations the last launch ran, or KernelFault where its blocks failed to meet."""
        g = self.blocks
        state = self.be.download(self.d_bar, np.zeros(g + 2, np.uint32))[g:]
        if state[0] == 2:
            raise KernelFault("fused: a block read a value tagged with a later iteration than it awaited (a bug in "
                               "the kernel's exchange); the results of this launch are void")
        if state[0]:
            raise KernelFault(f"fused: a block waited more than {BARRIER_TIMEOUT_NS / 1e9:g} s for the others: the "
                               f"{self.blocks} blocks were not all resident (another process on this GPU?), or a "
                               f"value was never written")
        return int(state[1])

    def block(self, iterations: int):
        """A training launch of `iterations` samples that never stops early, as a no-argument callable for
        `measure` (mlp.time_block): the tags advance as _launch's do, nothing is read back between launches
        (check_status reads the last one's)."""
        def run() -> None:
            self._start(iterations, 0, -1.0)
            self.tag0 += iterations + 1
            self.columns_swapped = self.prev_w and iterations % 2 == 1
        return run

    def train(self, iterations: int, tolerance: float, during=None) -> tuple[float, list[float]]:
        """Train up to `iterations` samples (at most EPOCHS_PER_LAUNCH epochs) from sample 0, stopping
        after an epoch whose mean error is within `tolerance` (negative: never). Returns seconds
        and the mean error of each epoch run (the last may be partial)."""
        ms, done, sums = self._launch(iterations, 0, tolerance, during)
        sizes = [min(self.n, done - e * self.n) for e in range(-(-done // self.n))]
        return ms * 1e-3, [float(np.float32(s) / np.float32(k)) for s, k in zip(sums, sizes)]  # as the kernel

    def feedforward(self, data: glyphs.Dataset) -> tuple[np.ndarray, float]:
        """The outputs for every sample of `data` and the device milliseconds, in one launch."""
        self.load_data(data)
        ms, _, _ = self._launch(len(data), 1, -1.0)
        pred = self.be.download(self.d_pred, np.zeros(len(data) * self.layers[-1], np.float32))
        return pred.reshape(len(data), self.layers[-1]).astype(np.float64), ms

    def phase_times(self, iterations: int) -> tuple[np.ndarray, np.ndarray, float]:
        """(wait, work) in µs per iteration for each phase of the last launch, from a kernel built
        with PHASE_TIMES (block 0's view; SM cycles turned into time by the launch's own clock),
        and that clock in MHz."""
        raw = self.be.download(self.d_phase, np.zeros(PHASE_WORDS, np.int64))
        n = phases_per_iteration(self.layers, self.out_local)
        mhz = int(raw[-2]) / max(int(raw[-1]), 1) * 1e3
        sums = raw[:4 * MAX_LAYERS].reshape(-1, 2)[:n] / mhz / iterations
        return sums[:, 0], sums[:, 1], mhz

    def poison(self) -> None:
        """NaN in every output and delta (sum) before a check, so a neuron never written shows up:
        as NaN in fused-barrier's weights, as a value the tagged kernels wait for in vain (tag 0)."""
        if not self.tagged:  # (its delta sums are added to, so they must start at 0)
            self.be.fill_nan(self.d_out, self.out_words)
            return
        for buf, words in ((self.d_out, self.out_words), (self.d_acc, self.tagged_acc_words)):  # NaN bits, tag 0
            self.be.write(buf, np.tile(np.array([0x7FC00000, 0], np.uint32), words // 2).view(np.float32))

    def barriers_passed(self) -> int:
        """Grid barriers the last launch passed (read from the counter, or block 0's flag)."""
        first = int(self.be.download(self.d_bar, np.zeros(self.blocks + 2, np.uint32))[0])
        return first if self.flag_barrier else first // self.blocks

    def transposed(self) -> list[np.ndarray]:
        """fused's second copy of every weight layer but the first (and, with OUT_LOCAL, the last,
        whose columns are not kept), W_l[:, :n_in].T, as the kernel last left it (it must equal
        the rows bit for bit)."""
        now = self.tagged_acc_words + (transposed_weights(self.layers) if self.columns_swapped else 0)
        flat = self.be.download(self.d_acc, np.zeros(self.acc_words, np.float32))[now:]
        out, at = [], 0
        for n_in, n_out in zip(self.layers[1:-1], self.layers[2:]):
            out.append(flat[at:at + n_in * _pad4(n_out)].reshape(n_in, _pad4(n_out))[:, :n_out].copy())
            at += n_in * _pad4(n_out)
        return out[:-1] if self.out_local else out

    def weights(self, init: list[np.ndarray]) -> list[np.ndarray]:
        flat = self.be.download(self.d_w, np.zeros(sum(self.w_sizes), np.float32))
        offs = np.concatenate([[0], np.cumsum(self.w_sizes)])
        return [flat[offs[l]:offs[l + 1]].reshape(W.shape).astype(np.float64) for l, W in enumerate(init)]
