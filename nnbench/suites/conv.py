"""The convolution workload (`nnbench conv`): layer shapes, the float64 reference, im2col, pooling,
and the forward paths of kernels_cu/conv/, each verified then timed, beside cuDNN.

Layout NCHW, fp32 (kernels_cu/conv/conv_common.cuh). A path is checked on fresh random non-zero
inputs with its output poisoned (NaN) first; the error is ||Y - ref|| / ||ref|| against a float64
reference computed by im2col and a float64 matrix product (the im2col itself is tested against a
direct loop on the CPU). Knows nothing about click or rich.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nnbench import measure, paths, registry
from nnbench.errors import KernelFault, NnbenchError
from nnbench.registry import Variant
from nnbench.runtime.compile import compile_sources
from nnbench.runtime.device import FFMA, TF32
from nnbench.runtime.vendor import AUTOTUNE_DRAWS, cudnn_conv
from nnbench.suites.base import Case, Session, Workload, problem_text
from nnbench.yamlnodes import compose, fail, integer, mapping, sequence, string

DEFAULT_RTOL = 1e-4  # fp32 sums of C*R*R <= 1,152 products land near 1e-6
CONSTANT_FLOATS = 16384  # 02_constant.cu's filter bank: 64 KiB of constant memory
TILED_RMAX, TILED_SMAX = 11, 2  # 03_tiled.cu's compile-time limits


@dataclass(frozen=True)
class ConvShape:
    N: int
    C: int
    H: int
    W: int
    K: int
    R: int
    stride: int = 1
    pad: int = 0

    @property
    def Ho(self) -> int:
        return (self.H + 2 * self.pad - self.R) // self.stride + 1

    @property
    def Wo(self) -> int:
        return (self.W + 2 * self.pad - self.R) // self.stride + 1

    @property
    def label(self) -> str:
        return (f"N{self.N} C{self.C} {self.H}x{self.W} K{self.K} {self.R}x{self.R}"
                + (f" s{self.stride}" if self.stride != 1 else "") + (f" p{self.pad}" if self.pad else ""))

    @property
    def flops(self) -> float:
        return 2.0 * self.N * self.K * self.C * self.R * self.R * self.Ho * self.Wo

    @property
    def bytes(self) -> float:
        """The fewest bytes: read X and the filters once, write Y once."""
        return 4.0 * (self.N * self.C * self.H * self.W + self.K * self.C * self.R * self.R
                      + self.N * self.K * self.Ho * self.Wo)

    def as_dict(self) -> dict[str, int]:
        return {"N": self.N, "C": self.C, "H": self.H, "W": self.W, "K": self.K, "R": self.R, "stride": self.stride,
                "pad": self.pad}

    def footprint(self) -> tuple[float, float]:
        """(host bytes, device bytes) one layer needs: fp32 tensors and their fp64 reference (with a
        temporary the size of the output) on the host; two copies of each tensor and the unrolled
        input on the device."""
        tensors = self.N * self.C * self.H * self.W + self.K * self.C * self.R * self.R + \
            self.N * self.K * self.Ho * self.Wo
        out = self.N * self.K * self.Ho * self.Wo
        return float(12 * tensors + 16 * out + self.unroll_bytes), float(8 * tensors + self.unroll_bytes)

    @property
    def unroll_bytes(self) -> int:
        """The unroll path's workspace: the C*R*R x N*Ho*Wo matrix (the K^2 blow-up), plus the GEMM's
        output before it is moved to NCHW."""
        return 4 * self.N * self.Ho * self.Wo * (self.C * self.R * self.R + self.K)

    def dims(self) -> np.void:
        """The kernels' `ConvDims` struct (ten ints), as the record PyCUDA passes by value."""
        names = ("N", "C", "H", "W", "K", "R", "stride", "pad", "Ho", "Wo")
        values = (self.N, self.C, self.H, self.W, self.K, self.R, self.stride, self.pad, self.Ho, self.Wo)
        return np.array(values, dtype=np.dtype([(n, "<i4") for n in names]))[()]

    def validate(self) -> None:
        for name in ("N", "C", "H", "W", "K", "R", "stride"):
            if getattr(self, name) < 1:
                raise NnbenchError(f"--{name.lower()} {getattr(self, name)}: must be >= 1")
        if self.pad < 0:
            raise NnbenchError(f"--pad {self.pad}: must be >= 0")
        if self.R > self.H + 2 * self.pad or self.R > self.W + 2 * self.pad:
            raise NnbenchError(f"--r {self.R}: the filter is larger than the {self.H}x{self.W} input with pad "
                               f"{self.pad}")
        for what, n in (("X", self.N * self.C * self.H * self.W), ("Y", self.N * self.K * self.Ho * self.Wo)):
            if n >= 2**31:
                raise NnbenchError(f"{self.label}: {what} has {n:,} elements; the kernels index with 32-bit ints")


SETS_FILE = paths.CONFIGS / "conv.yaml"
LAYER_KEYS = ["n", "c", "h", "w", "k", "r", "stride", "pad"]


def load_sets(path: Path = SETS_FILE) -> dict[str, list[ConvShape]]:
    """configs/conv.yaml -> {set name: layers}; a bad key or value names the file and line."""
    top = mapping(path, compose(path), "top level", ["sets"], required=("sets",))
    out = {}
    for name, (_, body) in mapping(path, top["sets"][1], "sets").items():
        layers = []
        for i, node in enumerate(sequence(path, body, f"sets.{name}")):
            keys = mapping(path, node, f"sets.{name}[{i}]", LAYER_KEYS, required=tuple(LAYER_KEYS[:6]))
            vals = {k: integer(path, v, f"sets.{name}[{i}].{k}", minimum=0 if k == "pad" else 1)
                    for k, (_, v) in keys.items()}
            shape = ConvShape(vals["n"], vals["c"], vals["h"], vals["w"], vals["k"], vals["r"], vals.get("stride", 1),
                              vals.get("pad", 0))
            try:
                shape.validate()
            except NnbenchError as e:
                raise fail(path, node, f"sets.{name}[{i}]: {e}") from None
            layers.append(shape)
        out[str(name)] = layers
    return out


def refusal(v: Variant, params: dict, shape: ConvShape) -> str | None:
    """Why a path cannot run this layer (None when it can): the fixed limits of its kernel."""
    if v.runner == "constant" and shape.C * shape.R * shape.R > CONSTANT_FLOATS:
        return (f"constant: one output map's filters ({shape.C * shape.R * shape.R:,} floats) exceed the "
                f"{CONSTANT_FLOATS:,} of 64 KiB constant memory")
    if v.source == "conv/03_tiled.cu" and (shape.R > TILED_RMAX or shape.stride > TILED_SMAX):
        return f"tiled: supports filters up to {TILED_RMAX}x{TILED_RMAX} and strides up to {TILED_SMAX}"
    return None


# -- the reference --------------------------------------------------------------------------------
def im2col(x: np.ndarray, R: int, stride: int, pad: int) -> np.ndarray:
    """(N, C, H, W) -> (N, C*R*R, Ho*Wo): row c*R*R + p*R + q, column h*Wo + w (the unroll kernel's
    layout), zero padding outside the image."""
    N, C, H, W = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    Ho, Wo = (H + 2 * pad - R) // stride + 1, (W + 2 * pad - R) // stride + 1
    win = np.lib.stride_tricks.sliding_window_view(xp, (R, R), axis=(2, 3))[:, :, ::stride, ::stride][:, :, :Ho, :Wo]
    return win.transpose(0, 1, 4, 5, 2, 3).reshape(N, C * R * R, Ho * Wo)


def im2col_loop(x: np.ndarray, R: int, stride: int, pad: int) -> np.ndarray:
    """The same matrix by the seed's loops, element by element (the test of `im2col`)."""
    N, C, H, W = x.shape
    Ho, Wo = (H + 2 * pad - R) // stride + 1, (W + 2 * pad - R) // stride + 1
    u = np.zeros((N, C * R * R, Ho * Wo), dtype=x.dtype)
    for n in range(N):
        for c in range(C):
            for p in range(R):
                for q in range(R):
                    for h in range(Ho):
                        for w in range(Wo):
                            hh, ww = h * stride - pad + p, w * stride - pad + q
                            if 0 <= hh < H and 0 <= ww < W:
                                u[n, (c * R + p) * R + q, h * Wo + w] = x[n, c, hh, ww]
    return u


def conv_reference(x: np.ndarray, wt: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """float64 y = conv(x, wt): for each image, Wt (K x C*R*R) times its unrolled input."""
    N, _, H, W = x.shape
    K, C, R, _ = wt.shape
    Ho, Wo = (H + 2 * pad - R) // stride + 1, (W + 2 * pad - R) // stride + 1
    u = im2col(x.astype(np.float64), R, stride, pad)
    # a BLAS product per image (np.matmul broadcasts over N): np.einsum without `optimize` runs its own
    # unblocked loop, 27x slower at the ResNet layer (the gate's conv part spent seconds here per run)
    return np.matmul(wt.reshape(K, C * R * R).astype(np.float64), u).reshape(N, K, Ho, Wo)


def col2im(u: np.ndarray, shape: tuple[int, int, int, int], R: int, stride: int, pad: int) -> np.ndarray:
    """The adjoint of `im2col`: (N, C*R*R, Ho*Wo) -> (N, C, H, W), every column's entries added
    back where they came from (what the data gradient of the unroll path needs)."""
    N, C, H, W = shape
    Ho, Wo = (H + 2 * pad - R) // stride + 1, (W + 2 * pad - R) // stride + 1
    xp = np.zeros((N, C, H + 2 * pad, W + 2 * pad), dtype=u.dtype)
    cols = u.reshape(N, C, R, R, Ho, Wo)
    for p in range(R):
        for q in range(R):
            xp[:, :, p:p + stride * Ho:stride, q:q + stride * Wo:stride] += cols[:, :, p, q]
    return np.ascontiguousarray(xp[:, :, pad:pad + H, pad:pad + W])  # NCHW in memory, as uploads expect


def conv_backward_reference(x: np.ndarray, wt: np.ndarray, dy: np.ndarray, stride: int, pad: int):
    """float64 (dx, dw) of y = conv(x, wt) for the output gradient dy."""
    N = x.shape[0]
    K, C, R, _ = wt.shape
    u = im2col(x.astype(np.float64), R, stride, pad)
    dy2 = dy.astype(np.float64).reshape(N, K, -1)
    dw = np.tensordot(dy2, u, axes=([0, 2], [0, 2])).reshape(wt.shape)  # BLAS, as conv_reference
    du = np.matmul(wt.reshape(K, -1).astype(np.float64).T, dy2)
    return col2im(du, x.shape, R, stride, pad), dw


def pool_backward_reference(x: np.ndarray, dy: np.ndarray, S: int, mode: str) -> np.ndarray:
    """dx of pooling: avg spreads dy/(S*S) over the window; max sends dy to the window's first
    maximum (row-major order, as the kernel and PyTorch pick it); cut-off rows and columns get 0."""
    N, C, H, W = x.shape
    Ho, Wo = H // S, W // S
    dx = np.zeros((N, C, H, W))
    if mode == "avg":
        dx[:, :, :Ho * S, :Wo * S] = np.repeat(np.repeat(dy.astype(np.float64), S, axis=2), S, axis=3) / (S * S)
        return dx
    win = x[:, :, :Ho * S, :Wo * S].reshape(N, C, Ho, S, Wo, S).transpose(0, 1, 2, 4, 3, 5).reshape(N, C, Ho, Wo, -1)
    arg = win.argmax(axis=-1)
    n, c, h, w = np.indices((N, C, Ho, Wo))
    dx[n, c, h * S + arg // S, w * S + arg % S] = dy
    return dx


def pool_reference(x: np.ndarray, S: int, mode: str) -> np.ndarray:
    N, C, H, W = x.shape
    Ho, Wo = H // S, W // S
    win = x[:, :, :Ho * S, :Wo * S].astype(np.float64).reshape(N, C, Ho, S, Wo, S)
    return win.max(axis=(3, 5)) if mode == "max" else win.mean(axis=(3, 5))


def random_nonzero(rng: np.random.Generator, shape) -> np.ndarray:
    """Uniform in +-[0.25, 1]: no zeros, so an input a kernel skips changes the result."""
    m = rng.uniform(0.25, 1.0, size=shape)
    return (m * rng.choice([-1.0, 1.0], size=shape)).astype(np.float32)


# -- planning -------------------------------------------------------------------------------------
def plan(names: list[str], backend: str, overrides: dict[str, int]) -> list[tuple[Variant, dict]]:
    pool = registry.suite_variants("conv", backend) + [v for v in registry.suite_variants("conv", "cpu")
                                                       if backend == "cpu"]
    allowed = {v.name: v for v in registry.suite_variants("conv")}
    chosen = []
    for name in names or [v.name for v in dict.fromkeys(pool)]:
        if name not in allowed:
            raise NnbenchError(f"--path {name}: unknown; choose from {', '.join(allowed)}")
        v = allowed[name]
        if v.backend != backend and v.backend != "cpu":
            raise NnbenchError(f"--path {name}: needs a GPU; the {backend} backend runs: numpy")
        params = dict(v.defaults(), **{k: x for k, x in overrides.items() if v.param(k)})
        problems = v.problems(params)
        if problems:
            raise NnbenchError(problems[0])
        chosen.append((v, params))
    return sorted(chosen, key=lambda vp: vp[0].step)


# -- running --------------------------------------------------------------------------------------
class _Layer:
    """One layer's inputs, reference and output on the device."""

    def __init__(self, backend, shape: ConvShape, seed: int) -> None:
        rng = np.random.default_rng([seed, shape.N, shape.C, shape.H, shape.K, shape.R])
        self.x = random_nonzero(rng, (shape.N, shape.C, shape.H, shape.W))
        self.wt = random_nonzero(rng, (shape.K, shape.C, shape.R, shape.R))
        self.ref = conv_reference(self.x, self.wt, shape.stride, shape.pad)
        self.be, self.shape = backend, shape
        self.count = self.ref.size
        if backend.name == "cuda":
            self.X, self.Wt = backend.upload(self.x), backend.upload(self.wt)
            self.Y = backend.upload(np.zeros(self.ref.shape, np.float32))
            self.REF = backend.upload(self.ref)

    def rel_err(self) -> float:
        return self.be.rel_err(self.Y, self.REF, self.count)


def _direct_launch(backend, v: Variant, params: dict, comp, layer: _Layer):
    s = layer.shape
    kernel = backend.load(comp, "conv_forward")
    tile, kb = params["TILE"], params.get("KB", 1)
    tiles, func, dims = -(-s.Ho // tile) * -(-s.Wo // tile), kernel.func, s.dims()
    if v.runner != "constant":
        args = (dims, np.intp(int(layer.X)), np.intp(int(layer.Wt)), np.intp(int(layer.Y)))
        grid = (-(-s.K // kb), tiles, s.N)
        return lambda: func(*args, block=(tile, tile, 1), grid=grid)
    symbol = backend.symbol(kernel, "filters")
    per_map = s.C * s.R * s.R
    chunk = CONSTANT_FLOATS // per_map  # output maps per launch
    launches = []
    for k0 in range(0, s.K, chunk):
        maps = min(chunk, s.K - k0)
        launches.append((int(layer.Wt) + 4 * k0 * per_map, 4 * maps * per_map,
                         (dims, np.intp(int(layer.X)), np.int32(k0), np.intp(int(layer.Y))), (maps, tiles, s.N)))

    def run():
        for src, nbytes, args, grid in launches:
            backend.copy(symbol, src, nbytes)
            func(*args, block=(tile, tile, 1), grid=grid)
    return run


def _unroll_launch(backend, comp, gemm_comp, layer: _Layer):
    run, layer.U, layer.Z = unroll_forward(backend, comp, gemm_comp, layer.shape, layer.X, layer.Wt, layer.Y)
    return run


def unroll_forward(backend, comp, gemm_comp, s: ConvShape, X, Wt, Y):
    """Unroll all N images side by side, one GEMM (ladder step 8) over them, then back to NCHW.
    Returns (run, U, Z): the launcher and its two workspaces."""
    from nnbench.runtime import ladder_gemm
    unroll, to_nchw = backend.load(comp, "unroll").func, backend.load(comp, "to_nchw").func
    g = registry.get("gemm", "tf32x3")
    gp = g.defaults()
    kernel = backend.load(gemm_comp, g.kernel)
    m, crr = s.N * s.Ho * s.Wo, s.C * s.R * s.R
    U = backend.upload(np.zeros(m * crr, np.float32))
    Z = backend.upload(np.zeros(m * s.K, np.float32))
    gemm = ladder_gemm.launcher(backend, g, gp, kernel, m, s.K, crr, 1.0, U, Wt, 0.0, Z)
    dims = s.dims()
    u_grid, y_grid = _grid(backend, m * s.C), _grid(backend, m * s.K)
    u_args = (dims, np.intp(int(X)), np.intp(int(U)))
    y_args = (dims, np.intp(int(Z)), np.intp(int(Y)))

    def run():
        unroll(*u_args, block=(256, 1, 1), grid=u_grid)
        gemm()
        to_nchw(*y_args, block=(256, 1, 1), grid=y_grid)
    return run, U, Z


PATH_TMA_B = 2  # kernels_cu/common/wgmma_mainloop.cuh's `paths` bit: the filters come by bulk tensor copy
DIMS_SIGNATURE = "{40@4}"  # ConvDims by value: ten ints


def implicit_forward(backend, v: Variant, params: dict, comp, s: ConvShape, X, Wt, Y, pair: bool = True):
    """Conv step 9 (09_implicit_wgmma.cu): one launch, no workspace. The filters, read as the K-major
    GEMM operand (C*R*R x K, leading dimension C*R*R), come by a tensor map where the 16-byte stride
    rule allows, else by the producer's cp.async. K split in two runs as cluster pairs reduced through
    shared memory (`conv_forward_pair`; `pair` False: Y zeroed, then atomics, as any other split).
    Returns (run, path): the launcher and the filters' path, for the table."""
    from nnbench.runtime import tensormap
    from nnbench.runtime.params import raw
    kernel = backend.load(comp, "conv_forward")
    crr = s.C * s.R * s.R
    (tm,) = v.tensor_maps
    box = v.map_box(tm, params)
    if tensormap.tiled_problem(int(Wt), (crr, s.K), (4 * crr,), box, tm.swizzle) is None:
        w_map, bits, path = tensormap.encode_tiled(int(Wt), (crr, s.K), (4 * crr,), box, tm.swizzle), PATH_TMA_B, "TMA"
    else:
        w_map, bits, path = bytes(tensormap.MAP_BYTES), 0, "cp.async filters"
    tiles = -(-s.N * s.Ho * s.Wo // params["BM"]) * -(-s.K // params["BN"])
    slices = forward_slices(tiles, -(-crr // params["BK"]), backend.device.sm_count)
    grid = (-(-s.N * s.Ho * s.Wo // params["BM"]), -(-s.K // params["BN"]), slices)
    sig = DIMS_SIGNATURE + "PPP" + raw(tensormap.MAP_BYTES, tensormap.MAP_ALIGN) + "i"
    args = (s.dims().tobytes(), np.intp(int(X)), np.intp(int(Wt)), np.intp(int(Y)), w_map, np.int32(bits))
    if pair and slices == 2:  # the two slices of a tile as one cluster: no zeroing, no atomics
        kernel = backend.load(comp, "conv_forward_pair")
    main = backend.launcher(kernel, grid, v.launch_block(params), args, sig, smem=v.dynamic_smem_bytes(params))
    if slices == 1:
        return main, path
    if pair and slices == 2:
        return main, f"{path}, split-K 2 (cluster pairs)"
    count = s.N * s.K * s.Ho * s.Wo
    clear = backend.launcher(backend.load(comp, "clear"), _grid(backend, count), (256, 1, 1),
                             (np.intp(int(Y)), np.int32(count)), "Pi")

    def run():
        clear()
        main()
    run.parts = {"clear": clear, "main": main}  # for timing Y's zeroing apart
    return run, f"{path}, split-K {slices}"


SPLIT_COST = 0.92  # a split pays Y's zeroing and an atomic epilogue: ~8% of a forward, charged per split run
SPLIT_MIN_K_BLOCKS = 16  # a slice also pays the ring's fill: at 9 k-blocks a slice (N32 C64 56x56 K128 s2) the
# split ran 7% slower (0.0740 -> 0.0793 ms), at 18 (N32 C128 28x28 K128) 8% faster (0.1373 -> 0.1267 ms)


def forward_slices(tiles: int, k_blocks: int, sms: int) -> int:
    """Slices of K for the forward: the count, of 1 to 3 with at least SPLIT_MIN_K_BLOCKS k-blocks each,
    whose waves are fullest (tiles x slices over whole waves of the SMs), a split charged SPLIT_COST for
    its zeroing and atomics. 196 tiles on 132 SMs fill 74% of two waves; in two slices, 99% of three."""
    def score(n: int) -> float:
        units = tiles * n
        return units / (-(-units // sms) * sms) * (1.0 if n == 1 else SPLIT_COST)
    return max((n for n in (1, 2, 3) if n == 1 or k_blocks // n >= SPLIT_MIN_K_BLOCKS), key=score)


def filter_grad_slices(tiles: int, k_blocks: int, sms: int) -> int:
    """Slices of the filter gradient's N*Ho*Wo-long reduction: as many as fill the SMs, each of at
    least 4 k-blocks (a slice pays the pipeline's fill and an atomic epilogue)."""
    return max(1, min(sms // tiles, k_blocks // 4))


def implicit_backward(backend, v: Variant, params: dict, comp, s: ConvShape, X, Wt, dY, dX, dW):
    """Conv step 10 (10_implicit_wgmma_backward.cu): dW zeroed, the filter gradient's slices added into
    it, then the data gradient; no workspace. The filter gradient reads dY by a 3-D tensor map (Ho*Wo,
    K, N) where Ho*Wo is a multiple of 4 (the 16-byte stride rule), else by cp.async. dX None: the
    filter gradient alone (a first layer, whose input needs no gradient: LeNet-5's conv1). Returns (run,
    path)."""
    from nnbench.runtime import tensormap
    from nnbench.runtime.params import raw
    block, smem = v.launch_block(params), v.dynamic_smem_bytes(params)
    bm, bn, bk = params["BM"], params["BN"], params["BK"]
    crr, hw = s.C * s.R * s.R, s.Ho * s.Wo
    ip = lambda b: np.intp(int(b))  # noqa: E731
    dims = s.dims().tobytes()
    tiles = -(-crr // bm) * -(-s.K // bn)
    slices = filter_grad_slices(tiles, s.N * -(-hw // bk), backend.device.sm_count)
    map_dims, strides, box = (hw, s.K, s.N), (4 * hw, 4 * hw * s.K), (bk, bn, 1)
    if tensormap.tiled_problem(int(dY), map_dims, strides, box, 128) is None:
        dy_map, bits, path = tensormap.encode_tiled(int(dY), map_dims, strides, box, 128), PATH_TMA_B, "TMA dY"
    else:
        dy_map, bits, path = bytes(tensormap.MAP_BYTES), 0, "cp.async dY"
    clear = backend.launcher(backend.load(comp, "clear"), _grid(backend, s.K * crr), (256, 1, 1),
                             (ip(dW), np.int32(s.K * crr)), "Pi")
    filt = backend.launcher(backend.load(comp, "conv_filter_grad"), (-(-crr // bm), -(-s.K // bn), slices), block,
                            (dims, ip(X), ip(dY), ip(dW), dy_map, np.int32(bits)),
                            DIMS_SIGNATURE + "PPP" + raw(tensormap.MAP_BYTES, tensormap.MAP_ALIGN) + "i", smem=smem)
    if dX is None:
        def filter_only():
            clear()
            filt()
        filter_only.parts = {"filter": filter_only}
        return filter_only, f"filter split-K {slices}, {path}, no data gradient"
    phase_pixels = s.N * -(-s.H // s.stride) * -(-s.W // s.stride)  # the largest of the stride^2 phases
    data_slices = conv_data_slices(s, bm, bn, bk, backend.device.sm_count)
    # At stride 1 the data gradient's B comes by the copy engine from the filters transposed into dW's
    # buffer (written by the filter gradient only after the data gradient has read them), where the map's
    # 16-byte stride rule allows; else (and for a strided layer's phases) the producer gathers it.
    kk = s.K * s.R * s.R
    wt2_ok = s.stride == 1 and tensormap.tiled_problem(int(dW), (kk, s.C), (4 * kk,), (bk, bn), 128) is None
    wt2_map = tensormap.encode_tiled(int(dW), (kk, s.C), (4 * kk,), (bk, bn), 128) if wt2_ok else \
        bytes(tensormap.MAP_BYTES)
    transpose = backend.launcher(backend.load(comp, "transpose_filters"), _grid(backend, s.K * crr), (256, 1, 1),
                                 (dims, ip(Wt), ip(dW)), DIMS_SIGNATURE + "PP")
    data_pair = s.stride == 1 and data_slices == 2  # as the forward's: cluster pairs, no zeroing of dX
    data_launch = backend.launcher(backend.load(comp, "conv_data_grad_pair" if data_pair else "conv_data_grad"),
                                   (-(-phase_pixels // bm), -(-s.C // bn), s.stride * s.stride * data_slices), block,
                                   (dims, ip(dY), ip(Wt), ip(dX), wt2_map, np.int32(PATH_TMA_B if wt2_ok else 0)),
                                   DIMS_SIGNATURE + "PPP" + raw(tensormap.MAP_BYTES, tensormap.MAP_ALIGN) + "i",
                                   smem=smem)
    clear_dx = backend.launcher(backend.load(comp, "clear"), _grid(backend, s.N * s.C * s.H * s.W), (256, 1, 1),
                                (ip(dX), np.int32(s.N * s.C * s.H * s.W)), "Pi")

    def data():
        if wt2_ok:
            transpose()
        if data_slices > 1 and not data_pair:  # the slices add into dX
            clear_dx()
        data_launch()

    def run():  # the data gradient first: it reads the transposed filters from dW before dW is computed
        data()
        clear()
        filt()
    run.parts = {"filter": lambda: (clear(), filt()), "data": data}  # for timing each gradient alone
    data_text = f", data split-K {data_slices}" + (" (cluster pairs)" if data_pair else "") if data_slices > 1 else ""
    return run, f"filter split-K {slices}, {path}{data_text}" + (", TMA filters^T in dW" if wt2_ok else "")


def conv_data_slices(s: ConvShape, bm: int, bn: int, bk: int, sms: int) -> int:
    """Slices of K for the data gradient: at stride 1 the forward's rule over its tiles (N*H*W x C) and
    K*R*R; a strided layer's gridDim.z holds its stride^2 phases instead, one slice."""
    if s.stride > 1:
        return 1
    return forward_slices(-(-s.N * s.H * s.W // bm) * -(-s.C // bn), -(-s.K * s.R * s.R // bk), sms)


def _base(shape, flops: float, rtol: float, seed: int, env: dict | None) -> dict:
    """The fields every row of a problem carries."""
    return dict(env or {}, suite="conv", shape=shape.label, problem=problem_text(shape), unit="launch", flops=flops,
                bytes=shape.bytes, rtol=rtol, seed=seed)


def _timed(backend, rec: dict, layer: _Layer, launch, settings, rtol) -> dict:
    backend.fill_nan(layer.Y, layer.count)
    backend.timed(launch, 1)
    err = layer.rel_err()
    stats = measure.measure(backend, launch, settings)
    t = stats.median_ms * 1e-3
    s = layer.shape
    rec.update(stats.as_record(), gflops=s.flops / t / 1e9, gbs=s.bytes / t / 1e9, rel_err=err,
               status="PASS" if err <= rtol else "FAIL")
    return rec


def _numpy(rec: dict, layer: _Layer, rtol: float, settings) -> dict:
    """Verified once, then timed by `measure` as every other row is: a single timing had no spread, so
    the gate called every CPU conv row INVALID."""
    s = layer.shape
    w2 = layer.wt.reshape(s.K, -1)
    y = np.full(layer.ref.shape, np.nan, np.float32)

    def forward():
        u = im2col(layer.x, s.R, s.stride, s.pad)
        y[...] = np.stack([w2 @ u[n] for n in range(s.N)]).reshape(layer.ref.shape)

    import time
    from dataclasses import replace
    t0 = time.perf_counter()
    forward()
    one_s = time.perf_counter() - t0
    err = measure.rel_err(y, layer.ref)
    # A ResNet layer takes ~1 s in NumPy: ten samples of it made `conv --set resnet` take 96 s on 2 cores.
    # Where the budget holds fewer, 3 samples (still a median and a spread that the gate can read).
    fit = max(3, min(settings.min_samples, int(settings.budget_s / one_s)))
    stats = measure.measure(layer.be, forward, replace(settings, min_samples=fit))
    ms = stats.median_ms
    rec.update(stats.as_record(), gflops=s.flops / ms / 1e6, gbs=s.bytes / ms / 1e6, rel_err=err,
               status="PASS" if err <= rtol else "FAIL")
    return rec


def pool_check(backend, mode: str, x: np.ndarray, S: int) -> float:
    """Run 05_pool.cu (MODE avg or max) on `x` with the output poisoned; ||y - ref|| / ||ref||."""
    v = registry.get("pool", mode)
    (comp,) = compile_sources(backend.arch, [(v.source, v.defaults())])
    N, C, H, W = x.shape
    ref = pool_reference(x, S, mode)
    X, Y = backend.upload(x.astype(np.float32)), backend.upload(np.zeros(ref.shape, np.float32))
    backend.fill_nan(Y, ref.size)
    func = backend.load(comp, v.kernel).func
    func(np.int32(N), np.int32(C), np.int32(H), np.int32(W), np.int32(S), X, Y, block=(256, 1, 1),
         grid=_grid(backend, ref.size))
    return measure.rel_err(backend.download(Y, np.zeros(ref.shape, np.float32)), ref)


# -- backward -------------------------------------------------------------------------------------
AUTOTUNED = f"autotuned, the fastest of {len(AUTOTUNE_DRAWS)} draws"  # vendor.AUTOTUNE_DRAWS says why
BACKWARD_VENDORS = ("cudnn-backward", "cudnn-backward-tf32")  # the backward paths' baseline, and TF32 beside it
SPLIT_SLICES = 128  # the unroll path's filter gradient: slices of its N*Ho*Wo-long reduction


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def _grid(backend, total: int) -> tuple[int, int, int]:
    return (backend.device.stride_blocks(total), 1, 1)


def _unroll_backward(backend, v: Variant, params: dict, comp, fwd, layer: _Layer, bufs: dict):
    run, work = unroll_backward(backend, v, params, comp, fwd, layer.shape, layer.X, layer.Wt, bufs["dY"], bufs["dX"],
                                bufs["dW"])
    bufs.update(work)
    return run


def unroll_backward(backend, v: Variant, params: dict, comp, fwd_comp, s: ConvShape, X, Wt, dY, dX, dW, U=None):
    """dX and dW of y = conv(X, Wt) for dY, through the unrolled input (06_unroll_backward.cu); dX None:
    dW alone (a first layer, whose input needs no gradient); U: X already unrolled by the forward pass
    (unroll_forward's workspace, unchanged since), so it is not unrolled again. Returns (run, workspaces)."""
    k = {name: backend.load(comp, name).func for name in ("from_nchw", "filter_grad", "sum_slices", "data_grad",
                                                         "col2im")}
    threads = v.threads(params)
    m, crr = s.N * s.Ho * s.Wo, s.C * s.R * s.R
    kps = _round_up(-(-m // SPLIT_SLICES), params["BK"])
    slices = -(-m // kps)
    reuse = U is not None
    work = dict(U=U if reuse else backend.upload(np.zeros(m * crr, np.float32)),
                dZ=backend.upload(np.zeros(m * s.K, np.float32)),
                G=backend.upload(np.zeros(slices * crr * s.K, np.float32)),
                dU=backend.upload(np.zeros(m * crr, np.float32) if dX is not None else np.zeros(1, np.float32)))
    U, dZ, G, dU = (work[n] for n in ("U", "dZ", "G", "dU"))
    unroll = backend.load(fwd_comp, "unroll").func
    dims = s.dims()
    ip = lambda b: np.intp(int(b))
    bm, bn = params["BM"], params["BN"]

    def run():
        if not reuse:
            unroll(dims, ip(X), ip(U), block=(256, 1, 1), grid=_grid(backend, m * s.C))
        k["from_nchw"](dims, ip(dY), ip(dZ), block=(256, 1, 1), grid=_grid(backend, m * s.K))
        k["filter_grad"](np.int32(crr), np.int32(s.K), np.int32(m), ip(U), ip(dZ), ip(G), np.int32(kps),
                         block=(threads, 1, 1), grid=(-(-crr // bm), -(-s.K // bn), slices))
        k["sum_slices"](ip(G), np.int32(crr * s.K), np.int32(slices), ip(dW), block=(256, 1, 1),
                        grid=_grid(backend, crr * s.K))
        if dX is None:
            return
        k["data_grad"](np.int32(m), np.int32(crr), np.int32(s.K), ip(dZ), ip(Wt), ip(dU),
                       block=(threads, 1, 1), grid=(-(-m // bm), -(-crr // bn), 1))
        k["col2im"](dims, ip(dU), ip(dX), block=(256, 1, 1), grid=_grid(backend, s.N * s.C * s.H * s.W))
    return run, work


def _direct_backward(backend, params: dict, comp, layer: _Layer, bufs: dict):
    s = layer.shape
    dg = backend.load(comp, "data_grad_direct").func
    fg = backend.load(comp, "filter_grad_direct").func
    dims, ip = s.dims(), (lambda b: np.intp(int(b)))
    threads = params["THREADS"]

    def run():
        dg(dims, ip(bufs["dY"]), ip(layer.Wt), ip(bufs["dX"]), block=(256, 1, 1), grid=_grid(backend, layer.x.size))
        fg(dims, ip(layer.X), ip(bufs["dY"]), ip(bufs["dW"]), block=(threads, 1, 1), grid=(layer.wt.size, 1, 1))
    return run


def pool_backward_check(backend, mode: str, x: np.ndarray, S: int) -> float:
    """05_pool.cu's pool_backward against the float64 reference (dX poisoned except the cut-off
    edge, which the host zeroes as the kernel's contract says)."""
    v = registry.get("pool", mode)
    (comp,) = compile_sources(backend.arch, [(v.source, v.defaults())])
    N, C, H, W = x.shape
    dy = random_nonzero(np.random.default_rng(5), (N, C, H // S, W // S))
    ref = pool_backward_reference(x, dy, S, mode)
    init = np.full(x.shape, np.nan, np.float32)
    init[:, :, (H // S) * S:, :] = 0.0
    init[:, :, :, (W // S) * S:] = 0.0
    X, DY, DX = backend.upload(x.astype(np.float32)), backend.upload(dy), backend.upload(init)
    func = backend.load(comp, "pool_backward").func
    func(np.int32(N), np.int32(C), np.int32(H), np.int32(W), np.int32(S), X, DY, DX, block=(256, 1, 1),
         grid=_grid(backend, dy.size))
    return measure.rel_err(backend.download(DX, np.zeros(x.shape, np.float32)), ref)


# -- the workload ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class LeNetProblem:
    """LeNet-5's whole SGD step on a batch of letter images (nnbench/suites/lenet.py)."""

    batch: int = 64
    rate: float = 0.05

    @property
    def label(self) -> str:
        return f"LeNet-5 B={self.batch}"

    def as_dict(self) -> dict:
        return {"model": "lenet5", "batch": self.batch, "rate": self.rate}

    @property
    def flops(self) -> float:
        return 0.0

    @property
    def bytes(self) -> float:
        return 0.0


class ConvSession(Session):
    """Per layer: inputs, the float64 forward reference and (for the backward paths, made on first
    use) dY and the float64 data and filter gradients, all on the device; cuDNN as the vendor row."""

    def __init__(self, backend, settings, rtol: float, seed: int, env: dict) -> None:
        self.backend, self.settings, self.rtol, self.seed, self.env = backend, settings, rtol, seed, env
        self.layer: _Layer | None = None
        self.grads: dict | None = None
        self._helpers: dict[str, object] = {}

    def base_record(self, problem) -> dict:
        return _base(problem, problem.flops, self.rtol, self.seed, self.env)

    def prepare(self, problem, following=None) -> None:
        if isinstance(problem, ConvShape) and (self.layer is None or self.layer.shape != problem):
            self.layer, self.grads = None, None
            self.layer = _Layer(self.backend, problem, self.seed)

    def helper(self, v: Variant):
        """A module a path needs beside its own (the unroll path's GEMM, the backward's unroll)."""
        key = f"{v.suite}/{v.name}"
        if key not in self._helpers:
            (self._helpers[key],) = compile_sources(self.backend.arch, [(v.source, v.defaults())])
        return self._helpers[key]

    def run_vendor(self, name: str, problem) -> dict | None:
        if name == "torch" and isinstance(problem, LeNetProblem):
            from nnbench.suites import lenet
            rows = list(lenet.run(self.backend, problem.batch, problem.rate, self.seed, self.settings, env=self.env,
                                  paths=()))  # PyTorch's rows alone
            row = next((r for r in rows if r["variant"] == "torch-step"), None)
            return dict(row, variant="torch", shape=problem.label, problem=problem_text(problem), unit="step") \
                if row else None
        if name in BACKWARD_VENDORS and isinstance(problem, ConvShape):
            return self._cudnn_backward(name, problem)
        if name not in ("cudnn", "cudnn-tf32") or not isinstance(problem, ConvShape):
            return None
        layer = self.layer
        s = problem
        tf32 = name == "cudnn-tf32"  # a labelled row for context; the FP32 row is the baseline
        draws = cudnn_conv(int(layer.X), int(layer.Wt), (s.N, s.C, s.H, s.W, s.K, s.R), s.stride, s.pad,
                           (int(layer.Y),), tf32=tf32)
        rec = dict(self.base_record(problem), variant=name, step="", precision=TF32 if tf32 else FFMA,
                   params=f"torch conv2d, cudnn.benchmark ({AUTOTUNED}), TF32 {'on' if tf32 else 'off'}, "
                          "its own output")
        if tf32:
            rec["rtol"] = measure.TF32_RTOL
        return self._cudnn_row(rec, draws, lambda: self.backend.fill_nan(layer.Y, layer.count), layer.rel_err)

    def _cudnn_row(self, rec: dict, draws, poison, rel_err) -> dict:
        """A cuDNN row: every autotune draw (vendor.AUTOTUNE_DRAWS) timed by `measure`, whose warm-up
        runs its autotuning; the fastest kept, its outputs poisoned, made again and verified. Which
        draw was kept, each draw's time and its kernels (the algorithm it chose, named after the
        timing) go to `tiles`: they differ between processes, so they stay out of `params`, which
        names the case."""
        if draws is None:
            return dict(rec, status="SKIP", error="PyTorch is not installed")
        timed = [(measure.measure(self.backend, d.launch, self.settings), d) for d in draws]
        stats, best = min(timed, key=lambda sd: sd[0].median_ms)
        notes = "; ".join(f"{d.label} {s.median_ms:.4f} ms: {d.kernels()}" for s, d in timed)
        poison()
        best.launch()
        best.result()
        err = rel_err()
        return dict(rec, **stats.as_record(), rel_err=err, status="PASS" if err <= rec["rtol"] else "FAIL",
                    tiles=f"kept {best.label} · {notes}")

    def run_case(self, case: Case, problem, compiled) -> dict:
        v, params = case.variant, case.param_dict
        rec = dict(self.base_record(problem), variant=v.name, step=v.step, params=case.param_label,
                   precision=v.precision)
        if v.runner == "lenet":
            from nnbench.suites import lenet
            path = lenet.VARIANT_PATHS[v.name]
            rows = list(lenet.run(self.backend, problem.batch, problem.rate, self.seed, self.settings,
                                  with_torch=False, env=self.env, paths=(path,)))
            row = next(r for r in rows if r["variant"] == lenet.row_name(path, "step"))
            return dict(rec, **{k: row.get(k) for k in ("median_ms", "iqr_ms", "samples", "rel_err", "rtol", "status",
                                                        "error")}, unit="step")
        device = getattr(self.backend, "device", None)
        if device is not None and (why := v.arch_problem(device)):
            return dict(rec, status="SKIP", error=why)
        if isinstance(compiled, Exception):
            return dict(rec, status="ERROR", error=str(compiled))
        layer = self.layer
        if v.suite == "conv-backward":
            return self._backward(rec, v, params, compiled, layer)
        rec["workspace_bytes"] = problem.unroll_bytes if v.runner in ("unroll", "numpy") else 0
        if v.backend == "cpu":
            return _numpy(rec, layer, self.rtol, self.settings)
        if v.rtol is not None:
            rec["rtol"] = v.rtol
        try:
            if v.runner == "implicit":
                launch, path = implicit_forward(self.backend, v, params, compiled, problem, layer.X, layer.Wt, layer.Y)
                rec["params"] = f"{rec['params']} · {path}"
            elif v.runner == "unroll":
                launch = _unroll_launch(self.backend, compiled, self.helper(registry.get("gemm", "tf32x3")), layer)
            else:
                launch = _direct_launch(self.backend, v, params, compiled, layer)
            return _timed(self.backend, rec, layer, launch, self.settings, rec["rtol"])
        except KernelFault as e:
            return dict(rec, status="ERROR", error=f"kernel fault: {e}", fault=True)

    def _gradients(self) -> dict:
        """This layer's dY, the float64 dX and dW for it, and the output buffers, made on first use."""
        be, layer = self.backend, self.layer
        shape = layer.shape
        if self.grads is None:
            rng = np.random.default_rng([self.seed, 7, shape.N, shape.K])
            dy = random_nonzero(rng, layer.ref.shape)
            dx_ref, dw_ref = conv_backward_reference(layer.x, layer.wt, dy, shape.stride, shape.pad)
            self.grads = dict(dY=be.upload(dy), dX=be.upload(np.zeros(layer.x.shape, np.float32)),
                              dW=be.upload(np.zeros(layer.wt.shape, np.float32)), DX=be.upload(dx_ref),
                              DW=be.upload(dw_ref))
        return self.grads

    def _grad_err(self) -> float:
        """The larger of dX's and dW's ||out - ref|| / ||ref||."""
        be, bufs, layer = self.backend, self.grads, self.layer
        return max(be.rel_err(bufs["dX"], bufs["DX"], layer.x.size), be.rel_err(bufs["dW"], bufs["DW"], layer.wt.size))

    def _cudnn_backward(self, name: str, problem: ConvShape) -> dict:
        """cuDNN's data and filter gradients (one autograd call), verified against float64 as our
        backward paths are; the baseline of their % vendor."""
        tf32 = name.endswith("tf32")
        s, be = problem, self.backend
        bufs = self._gradients()
        rec = dict(self.base_record(problem), variant=name, step="", precision=TF32 if tf32 else FFMA,
                   flops=2 * s.flops, vendor="cudnn-backward",
                   params=f"torch convolution_backward, cudnn.benchmark ({AUTOTUNED}), TF32 {'on' if tf32 else 'off'}, "
                          "its own outputs")
        if tf32:
            rec["rtol"] = measure.TF32_RTOL
        draws = cudnn_conv(int(self.layer.X), int(self.layer.Wt), (s.N, s.C, s.H, s.W, s.K, s.R), s.stride, s.pad,
                           (int(bufs["dX"]), int(bufs["dW"])), tf32=tf32, dy_ptr=int(bufs["dY"]))

        def poison() -> None:
            be.fill_nan(bufs["dX"], self.layer.x.size)
            be.fill_nan(bufs["dW"], self.layer.wt.size)
        return self._cudnn_row(rec, draws, poison, self._grad_err)

    def _backward(self, rec: dict, v: Variant, params: dict, comp, layer: _Layer) -> dict:
        """dX and dW both checked against float64 (both poisoned first; the error is the larger),
        then the whole backward pass timed."""
        be, shape = self.backend, layer.shape
        bufs = self._gradients()
        rec.update(flops=2 * shape.flops, workspace_bytes=shape.unroll_bytes * 2 if v.runner == "unroll" else 0)
        rec["vendor"] = "cudnn-backward"
        try:
            if v.runner == "implicit":
                launch, path = implicit_backward(be, v, params, comp, shape, layer.X, layer.Wt, bufs["dY"], bufs["dX"],
                                                 bufs["dW"])
                rec["params"] = f"{rec['params']} · {path}"
            elif v.runner == "unroll":
                launch = _unroll_backward(be, v, params, comp, self.helper(registry.get("conv", "unroll")), layer, bufs)
            else:
                launch = _direct_backward(be, params, comp, layer, bufs)
            be.fill_nan(bufs["dX"], layer.x.size)
            be.fill_nan(bufs["dW"], layer.wt.size)
            be.timed(launch, 1)
            err = self._grad_err()
            stats = measure.measure(be, launch, self.settings)
        except KernelFault as e:
            return dict(rec, status="ERROR", error=f"kernel fault: {e}", fault=True)
        return dict(rec, **stats.as_record(), rel_err=err, status="PASS" if err <= self.rtol else "FAIL")


class ConvWorkload(Workload):
    name = "conv"
    registry_suite = "conv"
    default_rtol = DEFAULT_RTOL
    vendor = "cudnn"
    baseline = "direct"
    vendor_rows = ("cudnn", "cudnn-tf32", "torch", *BACKWARD_VENDORS)

    def vendor_wanted(self, name: str, cases: list[Case]) -> bool:
        """cuDNN's backward rows only where a backward path runs."""
        return name not in BACKWARD_VENDORS or any(c.variant.suite == "conv-backward" for c in cases)

    def variants(self, backend: str | None = None) -> list[Variant]:
        return [v for suite in ("conv", "conv-backward", "conv-model") for v in registry.suite_variants(suite, backend)]

    def applies(self, case: Case, problem) -> bool:
        return (case.variant.runner == "lenet") == isinstance(problem, LeNetProblem)

    def refusal(self, case: Case, problem) -> str | None:
        return refusal(case.variant, case.param_dict, problem) if isinstance(problem, ConvShape) else None

    def parse_problems(self, path: Path, node) -> list:
        """{set: resnet} (configs/conv.yaml), [N, C, H, W, K, R, stride, pad], or {model: lenet5, batch: B}."""
        import yaml
        if isinstance(node, yaml.SequenceNode):
            dims = [integer(path, d, "shapes", minimum=0) for d in sequence(path, node, "shapes")]
            if len(dims) not in (6, 7, 8):
                raise fail(path, node, "shapes: expected [N, C, H, W, K, R] with optional stride and pad")
            return [ConvShape(*dims)]
        keys = mapping(path, node, "shapes", ["set", "model", "batch"])
        if "model" in keys:
            string(path, keys["model"][1], "shapes.model", ["lenet5"])
            batch = integer(path, keys["batch"][1], "shapes.batch", minimum=1) if "batch" in keys else 64
            return [LeNetProblem(batch)]
        if "set" not in keys:
            raise fail(path, node, "shapes: expected {set: NAME}, {model: lenet5} or [N, C, H, W, K, R, stride, pad]")
        known = load_sets()
        return known[string(path, keys["set"][1], "shapes.set", list(known))]

    def validate(self, problem) -> None:
        if isinstance(problem, ConvShape):
            problem.validate()

    def session(self, backend, settings, rtol, seed, env) -> ConvSession:
        return ConvSession(backend, settings, rtol, seed, env)


WORKLOAD = ConvWorkload()
