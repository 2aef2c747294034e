"""Launch code of the convolution paths (kernels_cu/conv/): the direct, unroll + GEMM and implicit-GEMM
forward and backward launches, and how a layer is split across the SMs."""

from __future__ import annotations

import copy

import numpy as np

from nnbench import registry
from nnbench.registry import Variant
from nnbench.runtime.vendor import AUTOTUNE_DRAWS
from nnbench.workloads.conv.bounds import forward_magnitude
from nnbench.workloads.conv.problem import CONSTANT_FLOATS, ConvShape
from nnbench.workloads.conv.reference import conv_reference, random_nonzero


# -- running --------------------------------------------------------------------------------------
class Layer:
    """One layer's inputs, reference and output on the device."""

    def __init__(self, backend, shape: ConvShape, seed: int) -> None:
        rng = np.random.default_rng([seed, shape.N, shape.C, shape.H, shape.K, shape.R])
        self.x = random_nonzero(rng, (shape.N, shape.C, shape.H, shape.W))
        self.wt = random_nonzero(rng, (shape.K, shape.C, shape.R, shape.R))
        self.ref = conv_reference(self.x, self.wt, shape.stride, shape.pad)
        self.mag = forward_magnitude(self.x, self.wt, shape.stride, shape.pad)
        self.be, self.shape = backend, shape
        self.count = self.ref.size
        if backend.runs_kernels:
            self.X, self.Wt = backend.upload(self.x), backend.upload(self.wt)
            self.Y = backend.upload(np.zeros(self.ref.shape, np.float32))
            self.REF, self.MAG = backend.upload(self.ref), backend.upload(self.mag)

    def error(self) -> float:
        """Y's conditioned error (nnbench/workloads/conv/bounds.py)."""
        return self.be.conditioned_error(self.Y, self.REF, self.MAG, self.count)

    def negated(self) -> Layer:
        """This layer's problem with X negated, in buffers of its own (allocated while these are alive, so at
        other addresses): the fresh buffers of nnbench/audit.py. A convolution is linear in X and negation is
        exact, so its reference is exactly -ref and its magnitudes are these: no second float64 reference."""
        other = copy.copy(self)
        other.x, other.ref = -self.x, -self.ref
        if self.be.runs_kernels:
            other.X, other.Wt = self.be.upload(other.x), self.be.upload(self.wt)
            other.Y, other.REF = self.be.upload(np.zeros(self.ref.shape, np.float32)), self.be.upload(other.ref)
        return other


def direct_launch(backend, v: Variant, params: dict, comp, layer: Layer):
    s = layer.shape
    kernel = backend.load(comp, "conv_forward")
    tile, kb = params["TILE"], params.get("KB", 1)
    tiles, dims, block = -(-s.Ho // tile) * -(-s.Wo // tile), s.dims(), (tile, tile, 1)
    if v.runner != "constant":
        args = (dims, np.intp(int(layer.X)), np.intp(int(layer.Wt)), np.intp(int(layer.Y)))
        return backend.bind(kernel, (-(-s.K // kb), tiles, s.N), block, args)
    symbol = backend.symbol(kernel, "filters")
    per_map = s.C * s.R * s.R
    chunk = CONSTANT_FLOATS // per_map  # output maps per launch
    launches = []
    for k0 in range(0, s.K, chunk):
        maps = min(chunk, s.K - k0)
        launches.append((int(layer.Wt) + 4 * k0 * per_map, 4 * maps * per_map,
                         backend.bind(kernel, (maps, tiles, s.N), block,
                                      (dims, np.intp(int(layer.X)), np.int32(k0), np.intp(int(layer.Y))))))

    def run():
        for src, nbytes, launch in launches:
            backend.copy(symbol, src, nbytes)
            launch()
    return run


def unroll_launch(backend, comp, gemm_comp, layer: Layer):
    run, layer.U, layer.Z = unroll_forward(backend, comp, gemm_comp, layer.shape, layer.X, layer.Wt, layer.Y)
    return run


def unroll_forward(backend, comp, gemm_comp, s: ConvShape, X, Wt, Y):
    """Unroll all N images side by side, one GEMM (ladder step 8) over them, then back to NCHW.
    Returns (run, U, Z): the launcher and its two workspaces."""
    from nnbench.runtime import ladder_gemm
    g = registry.TF32X3_GEMM
    gp = g.defaults()
    kernel = backend.load(gemm_comp, g.kernel)
    m, crr = s.N * s.Ho * s.Wo, s.C * s.R * s.R
    U = backend.upload(np.zeros(m * crr, np.float32))
    Z = backend.upload(np.zeros(m * s.K, np.float32))
    gemm = ladder_gemm.bind_gemm(backend, g, gp, kernel, m, s.K, crr, 1.0, U, Wt, 0.0, Z)
    dims = s.dims()
    unroll = backend.bind(backend.load(comp, "unroll"), elementwise_grid(backend, m * s.C), (256, 1, 1),
                          (dims, np.intp(int(X)), np.intp(int(U))))
    to_nchw = backend.bind(backend.load(comp, "to_nchw"), elementwise_grid(backend, m * s.K), (256, 1, 1),
                           (dims, np.intp(int(Z)), np.intp(int(Y))))

    def run():
        unroll()
        gemm()
        to_nchw()
    return run, U, Z


PATH_TMA_B = 2  # kernels_cu/common/wgmma_mainloop.cuh's `paths` bit: the filters come by bulk tensor copy
DIMS_SIGNATURE = "{40@4}"  # ConvDims by value: ten ints


def implicit_forward(backend, v: Variant, params: dict, comp, s: ConvShape, X, Wt, Y, pair: bool = True,
                     slices: int | None = None):
    """Conv step 9 (09_implicit_wgmma.cu): one launch, no workspace. The filters, read as the K-major
    GEMM operand (C*R*R x K, leading dimension C*R*R), come by a tensor map where the 16-byte stride
    rule allows, else by the producer's cp.async. K split in two runs as cluster pairs reduced through
    shared memory (`conv_forward_pair`; `pair` False: Y zeroed, then atomics, as any other split).
    `slices`: that many slices of K (the autotuner's candidate), else forward_slices' pick.
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
    slices = slices or forward_slices(tiles, -(-crr // params["BK"]), backend.device.sm_count)
    grid = (-(-s.N * s.Ho * s.Wo // params["BM"]), -(-s.K // params["BN"]), slices)
    sig = DIMS_SIGNATURE + "PPP" + raw(tensormap.MAP_BYTES, tensormap.MAP_ALIGN) + "i"
    args = (s.dims().tobytes(), np.intp(int(X)), np.intp(int(Wt)), np.intp(int(Y)), w_map, np.int32(bits))
    if pair and slices == 2:  # the two slices of a tile as one cluster: no zeroing, no atomics
        kernel = backend.load(comp, "conv_forward_pair")
    main = backend.bind(kernel, grid, v.launch_block(params), args, sig, smem=v.dynamic_smem_bytes(params))
    if slices == 1:
        return main, path
    if pair and slices == 2:
        return main, f"{path}, split-K 2 (cluster pairs)"
    count = s.N * s.K * s.Ho * s.Wo
    clear = backend.bind(backend.load(comp, "clear"), elementwise_grid(backend, count), (256, 1, 1),
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


def implicit_backward(backend, v: Variant, params: dict, comp, s: ConvShape, X, Wt, dY, dX, dW,
                      filter_split: int | None = None, data_split: int | None = None):
    """Conv step 10 (10_implicit_wgmma_backward.cu): dW zeroed, the filter gradient's slices added into
    it, then the data gradient; no workspace. The filter gradient reads dY by a 3-D tensor map (Ho*Wo,
    K, N) where Ho*Wo is a multiple of 4 (the 16-byte stride rule), else by cp.async. dX None: the
    filter gradient alone (a first layer, whose input needs no gradient: LeNet-5's conv1). `filter_split`,
    `data_split`: the autotuner's slices of each reduction, else filter_grad_slices' and conv_data_slices'.
    Returns (run, path)."""
    from nnbench.runtime import tensormap
    from nnbench.runtime.params import raw
    block, smem = v.launch_block(params), v.dynamic_smem_bytes(params)
    bm, bn, bk = params["BM"], params["BN"], params["BK"]
    crr, hw = s.C * s.R * s.R, s.Ho * s.Wo
    ip = lambda b: np.intp(int(b))  # noqa: E731
    dims = s.dims().tobytes()
    tiles = -(-crr // bm) * -(-s.K // bn)
    slices = filter_split or filter_grad_slices(tiles, s.N * -(-hw // bk), backend.device.sm_count)
    map_dims, strides, box = (hw, s.K, s.N), (4 * hw, 4 * hw * s.K), (bk, bn, 1)
    if tensormap.tiled_problem(int(dY), map_dims, strides, box, 128) is None:
        dy_map, bits, path = tensormap.encode_tiled(int(dY), map_dims, strides, box, 128), PATH_TMA_B, "TMA dY"
    else:
        dy_map, bits, path = bytes(tensormap.MAP_BYTES), 0, "cp.async dY"
    clear = backend.bind(backend.load(comp, "clear"), elementwise_grid(backend, s.K * crr), (256, 1, 1),
                         (ip(dW), np.int32(s.K * crr)), "Pi")
    filt = backend.bind(backend.load(comp, "conv_filter_grad"), (-(-crr // bm), -(-s.K // bn), slices), block,
                        (dims, ip(X), ip(dY), ip(dW), dy_map, np.int32(bits)),
                        DIMS_SIGNATURE + "PPP" + raw(tensormap.MAP_BYTES, tensormap.MAP_ALIGN) + "i", smem=smem)
    if dX is None:
        def filter_only():
            clear()
            filt()
        filter_only.parts = {"filter": filter_only}
        return filter_only, f"filter split-K {slices}, {path}, no data gradient"
    phase_pixels = s.N * -(-s.H // s.stride) * -(-s.W // s.stride)  # the largest of the stride^2 phases
    data_slices = data_split or conv_data_slices(s, bm, bn, bk, backend.device.sm_count)
    # At stride 1 the data gradient's B comes by the copy engine from the filters transposed into dW's
    # buffer (written by the filter gradient only after the data gradient has read them), where the map's
    # 16-byte stride rule allows; else (and for a strided layer's phases) the producer gathers it.
    kk = s.K * s.R * s.R
    wt2_ok = s.stride == 1 and tensormap.tiled_problem(int(dW), (kk, s.C), (4 * kk,), (bk, bn), 128) is None
    wt2_map = tensormap.encode_tiled(int(dW), (kk, s.C), (4 * kk,), (bk, bn), 128) if wt2_ok else \
        bytes(tensormap.MAP_BYTES)
    transpose = backend.bind(backend.load(comp, "transpose_filters"), elementwise_grid(backend, s.K * crr), (256, 1, 1),
                             (dims, ip(Wt), ip(dW)), DIMS_SIGNATURE + "PP")
    data_pair = s.stride == 1 and data_slices == 2  # as the forward's: cluster pairs, no zeroing of dX
    data_launch = backend.bind(backend.load(comp, "conv_data_grad_pair" if data_pair else "conv_data_grad"),
                               (-(-phase_pixels // bm), -(-s.C // bn), s.stride * s.stride * data_slices), block,
                               (dims, ip(dY), ip(Wt), ip(dX), wt2_map, np.int32(PATH_TMA_B if wt2_ok else 0)),
                               DIMS_SIGNATURE + "PPP" + raw(tensormap.MAP_BYTES, tensormap.MAP_ALIGN) + "i",
                               smem=smem)
    clear_dx = backend.bind(backend.load(comp, "clear"), elementwise_grid(backend, s.N * s.C * s.H * s.W), (256, 1, 1),
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


TUNE_SPLITS = (1, 2, 3)  # the forward's slices of K the autotuner times beside forward_slices' pick
TUNE_MIN_K_BLOCKS = 4  # each slice at least this many k-blocks (a slice pays the ring's fill)


def _bn_choices(v: Variant, params: dict) -> list[int]:
    """The case's BN first (the fixed behaviour leads: a tie keeps it), then the variant's other choices."""
    return [params["BN"], *(b for b in v.param("BN").choices if b != params["BN"])]


def forward_candidates(v: Variant, params: dict, s: ConvShape, sms: int) -> list[dict]:
    """The implicit forward's tiles the autotuner times on a layer: each BN with forward_slices' pick and
    1 to 3 slices of K (each of at least TUNE_MIN_K_BLOCKS k-blocks); the fixed rule's choice first."""
    out = []
    crr, pixels = s.C * s.R * s.R, s.N * s.Ho * s.Wo
    k_blocks = -(-crr // params["BK"])
    for bn in _bn_choices(v, params):
        rule = forward_slices(-(-pixels // params["BM"]) * -(-s.K // bn), k_blocks, sms)
        out += [{"BN": bn, "SPLIT": n} for n in dict.fromkeys((rule, *TUNE_SPLITS))
                if n == 1 or k_blocks // n >= TUNE_MIN_K_BLOCKS]
    return out


def backward_candidates(v: Variant, params: dict, s: ConvShape, sms: int) -> list[dict]:
    """The implicit backward's: each BN with the filter gradient's slices as filter_grad_slices picks them
    and half as many, and the data gradient's as conv_data_slices picks them and none (a strided layer's
    phases leave it one); the fixed rules' choice first."""
    out = []
    bm, bk, crr = params["BM"], params["BK"], s.C * s.R * s.R
    for bn in _bn_choices(v, params):
        rule = filter_grad_slices(-(-crr // bm) * -(-s.K // bn), s.N * -(-(s.Ho * s.Wo) // bk), sms)
        data = conv_data_slices(s, bm, bn, bk, sms)
        out += [{"BN": bn, "FILTER_SPLIT": f, "DATA_SPLIT": d} for f in dict.fromkeys((rule, max(1, rule // 2)))
                for d in dict.fromkeys((data, 1))]
    return out


def conv_data_slices(s: ConvShape, bm: int, bn: int, bk: int, sms: int) -> int:
    """Slices of K for the data gradient: at stride 1 the forward's rule over its tiles (N*H*W x C) and
    K*R*R; a strided layer's gridDim.z holds its stride^2 phases instead, one slice."""
    if s.stride > 1:
        return 1
    return forward_slices(-(-s.N * s.H * s.W // bm) * -(-s.C // bn), -(-s.K * s.R * s.R // bk), sms)


# -- backward -------------------------------------------------------------------------------------
AUTOTUNED = f"autotuned, the fastest of {len(AUTOTUNE_DRAWS)} draws"  # vendor.AUTOTUNE_DRAWS says why
BACKWARD_VENDORS = ("cudnn-backward", "cudnn-backward-tf32")  # the backward paths' baseline, and TF32 beside it
SPLIT_SLICES = 128  # the unroll path's filter gradient: slices of its N*Ho*Wo-long reduction


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def elementwise_grid(backend, total: int) -> tuple[int, int, int]:
    return (backend.device.stride_blocks(total), 1, 1)


def unroll_backward_launch(backend, v: Variant, params: dict, comp, fwd, layer: Layer, bufs: dict):
    run, work = unroll_backward(backend, v, params, comp, fwd, layer.shape, layer.X, layer.Wt, bufs["dY"], bufs["dX"],
                                bufs["dW"])
    bufs.update(work)
    return run


def unroll_backward(backend, v: Variant, params: dict, comp, fwd_comp, s: ConvShape, X, Wt, dY, dX, dW, U=None):
    """dX and dW of y = conv(X, Wt) for dY, through the unrolled input (06_unroll_backward.cu); dX None:
    dW alone (a first layer, whose input needs no gradient); U: X already unrolled by the forward pass
    (unroll_forward's workspace, unchanged since), so it is not unrolled again. Returns (run, workspaces)."""
    k = {name: backend.load(comp, name) for name in ("from_nchw", "filter_grad", "sum_slices", "data_grad", "col2im")}
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
    dims = s.dims()
    ip = lambda b: np.intp(int(b))
    bm, bn = params["BM"], params["BN"]
    launches = [] if reuse else [backend.bind(backend.load(fwd_comp, "unroll"), elementwise_grid(backend, m * s.C),
                                              (256, 1, 1), (dims, ip(X), ip(U)))]
    launches += [
        backend.bind(k["from_nchw"], elementwise_grid(backend, m * s.K), (256, 1, 1), (dims, ip(dY), ip(dZ))),
        backend.bind(k["filter_grad"], (-(-crr // bm), -(-s.K // bn), slices), (threads, 1, 1),
                     (np.int32(crr), np.int32(s.K), np.int32(m), ip(U), ip(dZ), ip(G), np.int32(kps))),
        backend.bind(k["sum_slices"], elementwise_grid(backend, crr * s.K), (256, 1, 1),
                     (ip(G), np.int32(crr * s.K), np.int32(slices), ip(dW)))]
    if dX is not None:
        launches += [
            backend.bind(k["data_grad"], (-(-m // bm), -(-crr // bn), 1), (threads, 1, 1),
                         (np.int32(m), np.int32(crr), np.int32(s.K), ip(dZ), ip(Wt), ip(dU))),
            backend.bind(k["col2im"], elementwise_grid(backend, s.N * s.C * s.H * s.W), (256, 1, 1),
                         (dims, ip(dU), ip(dX)))]

    def run():
        for launch in launches:
            launch()
    return run, work


def direct_backward_launch(backend, params: dict, comp, layer: Layer, bufs: dict):
    s = layer.shape
    dims, ip = s.dims(), (lambda b: np.intp(int(b)))
    data = backend.bind(backend.load(comp, "data_grad_direct"), elementwise_grid(backend, layer.x.size), (256, 1, 1),
                        (dims, ip(bufs["dY"]), ip(layer.Wt), ip(bufs["dX"])))
    filt = backend.bind(backend.load(comp, "filter_grad_direct"), (layer.wt.size, 1, 1), (params["THREADS"], 1, 1),
                        (dims, ip(layer.X), ip(bufs["dY"]), ip(bufs["dW"])))

    def run():
        data()
        filt()
    return run
