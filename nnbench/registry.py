"""Every kernel variant nnbench can run, described once, as data.

The CLI builds its options from this table, sweeps expand its parameters, tests compile and verify
every entry, and the docs list it. Constraints, launch geometry and shared-memory footprints are
expressions in `nnbench.expr`'s safe language over the parameters and the shape (M, N, K), so the
same text can be checked before compiling, printed in an error, and read in the docs.

GEMM layout, for the whole ladder: column-major, C = alpha*A*B + beta*C with A (M x K), B (K x N),
C (M x N), A(m, k) = A[m + k*M], as in cuBLAS and the seed lecture.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from nnbench import expr
from nnbench.errors import NnbenchError
from nnbench.measure import TF32_RTOL
from nnbench.runtime.device import FFMA, HOST, TF32, TF32X3


@dataclass(frozen=True)
class Param:
    name: str  # the -D macro, named as the seeds and their sources name it (TS, WPT, TSM, ...)
    default: int
    choices: tuple[int, ...]
    help: str

    @property
    def option(self) -> str:
        return "--" + self.name.lower().replace("_", "-")


@dataclass(frozen=True)
class Rule:
    expr: str  # must hold (true) for a valid parameter set
    why: str


@dataclass(frozen=True)
class TensorMap:
    """A bulk-tensor-copy map the host encodes for one operand (nnbench/runtime/tensormap.py): the box
    one copy moves (innermost first, expressions over the params) and its swizzle in bytes. The
    suite knows the operand's sizes and leading dimension; where the map is not allowed (a leading
    dimension breaking the 16-byte stride rule) the kernel takes its fallback path for that operand."""

    operand: str
    box: tuple[str, str]
    swizzle: int = 0


@dataclass(frozen=True)
class Variant:
    suite: str
    name: str
    step: int
    summary: str
    source: str | None  # under kernels_cu/; None for CPU-only variants
    params: tuple[Param, ...] = ()
    derived: tuple[tuple[str, str], ...] = ()  # (NAME, expr) computed from params, usable in rules
    rules: tuple[Rule, ...] = ()
    block: str = "(1, 1, 1)"
    grid: str = "(1, 1, 1)"  # may use M, N, K
    smem: str = "0"  # static shared memory in bytes, for refusing a case before it is compiled
    backend: str = "cuda"
    kernel: str = "gemm"
    tags: tuple[str, ...] = field(default=())
    # Parameter sets the runtime chooses among by timing them on the real shapes (batched: per GEMM).
    candidates: tuple[tuple[tuple[str, int], ...], ...] = ()
    # Which of its suite's host runners executes it (the suite dispatches on this, never on the name):
    # gemm: kernel | numpy; mlp: sequential | launches | fused | batched-numpy | batched | batched-cublas |
    # batched-wgmma;
    # conv: direct | constant | unroll | implicit | numpy | lenet; conv-backward: unroll | direct | implicit;
    # pool: pool.
    runner: str = "kernel"
    # The arithmetic (runtime.device.PRECISIONS): which ceiling its %peak is taken against, and the
    # label its rows carry.
    precision: str = FFMA
    arch: str | None = None  # an architecture-specific target (sm_90a): built for it, run only there
    dynamic_smem: str = "0"  # dynamic shared memory in bytes, asked for at launch
    tensor_maps: tuple[TensorMap, ...] = ()  # operands that arrive by bulk tensor copy
    rtol: float | None = None  # a lower-precision variant's own tolerance, replacing the run's
    # gemm: the kernel splits K over gridDim.z where the tiles alone leave SMs idle (its file says how the
    # slices of a tile share C, in one launch)
    split_k: bool = False

    def target(self, device_arch: str) -> str:
        """The architecture to build for on a device of `device_arch`."""
        return self.arch or device_arch

    def arch_problem(self, device) -> str | None:
        """Why this variant cannot run on `device` at all (an architecture-specific build elsewhere)."""
        if self.arch and self.arch.rstrip("a") != device.arch:
            return (f"{self.name} is built for {self.arch} (wgmma, bulk tensor copies) and runs only on compute "
                    f"capability {self.arch[3]}.{self.arch[4]} (H100, H200); {device.name} is {device.arch}")
        return None

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)

    def defaults(self) -> dict[str, int]:
        return {p.name: p.default for p in self.params}

    def parse_params(self, spec: str) -> dict[str, int]:
        """The defaults with a set like "THREADS=256:BARRIER=1" applied, checked against the choices."""
        params = self.defaults()
        for kv in filter(None, spec.split(":")):
            k, _, x = kv.partition("=")
            if self.param(k) is None or not x.lstrip("-").isdigit():
                raise NnbenchError(f"{self.name}: '{kv}' is not NAME=INTEGER with NAME one of "
                                   f"{', '.join(p.name for p in self.params) or '(none)'}")
            params[k] = int(x)
        if bad := self.problems(params):
            raise NnbenchError(bad[0])
        return params

    def env(self, params: dict[str, int], shape: dict[str, int] | None = None) -> dict[str, float]:
        env: dict[str, float] = {**params, **(shape or {})}
        for name, text in self.derived:
            env[name] = expr.evaluate(text, env)
        return env

    def problems(self, params: dict[str, int]) -> list[str]:
        """Why this parameter set is invalid for the variant (empty if it is valid)."""
        out = []
        for p in self.params:
            if params.get(p.name) not in p.choices:
                out.append(f"{p.option} {params.get(p.name)}: {self.name} allows {p.name} in "
                           f"{{{', '.join(map(str, p.choices))}}}")
        if out:
            return out
        env = self.env(params)
        for r in self.rules:  # in order: a later rule may divide by what an earlier one checks
            try:
                ok = expr.evaluate(r.expr, env)
            except expr.ExprError:
                ok = False
            if not ok:
                vals = ", ".join(f"{k}={_fmt(env[k])}" for k in sorted(expr.names(r.expr)) if k in env)
                return [f"{self.name} needs {r.expr} ({r.why}); got {vals}"]
        return out

    def device_problems(self, params: dict[str, int], device, registers: int | None = None,
                        arch: bool = True) -> list[str]:
        """Why this launch cannot run on `device` (a DeviceInfo): the architecture (unless `arch` is
        False), threads, static and dynamic shared memory and, once ptxas has said how many
        registers a thread needs, registers per block."""
        threads, smem = self.threads(params), self.smem_bytes(params)
        out = [why] if arch and (why := self.arch_problem(device)) else []
        dynamic = self.dynamic_smem_bytes(params)
        if dynamic and smem + dynamic > device.smem_per_block_optin:
            out.append(f"{smem + dynamic:,} bytes of shared memory per block; {device.name} allows at most "
                       f"{device.smem_per_block_optin:,}")
        if threads > device.max_threads_per_block:
            out.append(f"{threads} threads per block; {device.name} allows at most {device.max_threads_per_block}")
        if smem > device.smem_per_block:
            out.append(f"{smem:,} bytes of static shared memory per block; {device.name} allows at most "
                       f"{device.smem_per_block:,}")
        if registers is not None and registers * threads > device.regs_per_block:
            out.append(f"{registers} registers x {threads} threads = {registers * threads:,} registers per block; "
                       f"{device.name} allows at most {device.regs_per_block:,}")
        return out

    def threads(self, params: dict[str, int]) -> int:
        bx, by, bz = self.launch_block(params)
        return bx * by * bz

    def launch_block(self, params: dict[str, int]) -> tuple[int, int, int]:
        return _dim3(expr.evaluate(self.block, self.env(params)))

    def launch_grid(self, params: dict[str, int], shape: dict[str, int]) -> tuple[int, int, int]:
        return _dim3(expr.evaluate(self.grid, self.env(params, shape)))

    def smem_bytes(self, params: dict[str, int]) -> int:
        return int(expr.evaluate(self.smem, self.env(params)))

    def dynamic_smem_bytes(self, params: dict[str, int]) -> int:
        return int(expr.evaluate(self.dynamic_smem, self.env(params)))

    def map_box(self, tmap: TensorMap, params: dict[str, int]) -> tuple[int, ...]:
        env = self.env(params)
        return tuple(int(expr.evaluate(b, env)) for b in tmap.box)


def _fmt(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def _dim3(t) -> tuple[int, int, int]:
    t = tuple(int(x) for x in (t if isinstance(t, tuple) else (t,)))
    return (t + (1, 1, 1))[:3]  # type: ignore[return-value]


def _p(name: str, default: int, choices: tuple[int, ...], help: str) -> Param:
    return Param(name, default, choices, help)


_WARPTILE_PARAMS = (
    _p("BM", 128, (64, 128, 256), "block tile rows (m)"),
    _p("BN", 128, (64, 128, 256), "block tile columns (n)"),
    _p("BK", 16, (8, 16, 32), "k-slice staged in shared memory"),
    _p("WM", 64, (16, 32, 64, 128), "warp tile rows"),
    _p("WN", 32, (16, 32, 64, 128), "warp tile columns"),
    _p("WNITER", 2, (1, 2, 4, 8), "warp sub-tiles along n"),
    _p("TM", 8, (4, 8), "thread tile rows"),
    _p("TN", 4, (4, 8), "thread tile columns"),
)
_MIN_BLOCKS = _p("MIN_BLOCKS", 1, (1, 2), "resident blocks per SM asked of the register allocator (__launch_bounds__)")
_WARPTILE_DERIVED = (
    ("THREADS", "32 * (BM // WM) * (BN // WN)"),
    ("WMITER", "(WM * WN) // (32 * TM * TN * WNITER)"),
)
# Rules every warp-tiled step shares (steps 6, 7 and 8).
_WARPS_COVER_BLOCK = Rule("BM % WM == 0 and BN % WN == 0", "warp tiles must cover the block tile")
_THREADS_FIT = Rule("THREADS <= 1024", "at most 1024 threads per block")
_FLOAT4_LOADS_SHARED = Rule("(BM * BK // 4) % THREADS == 0 and (BN * BK // 4) % THREADS == 0",
                            "threads must share the tile's float4 loads evenly")
_WARPTILE_RULES = (
    _WARPS_COVER_BLOCK,
    _THREADS_FIT,
    Rule("WMITER >= 1 and WMITER * 32 * TM * TN * WNITER == WM * WN",
         "a warp tile must split into whole 32-lane sub-tiles"),
    Rule("WM % WMITER == 0 and WN % WNITER == 0", "sub-tiles must divide the warp tile"),
    Rule("(WM // WMITER) % TM == 0 and (WN // WNITER) % TN == 0 "
         "and ((WM // WMITER) // TM) * ((WN // WNITER) // TN) == 32", "a sub-tile must hold exactly 32 lanes"),
    _FLOAT4_LOADS_SHARED,
)

# Step 8's parameters, launch and footprint: also the batched MLP trainer's GEMMs (same mainloop).
_TF32X3 = dict(
    params=(_p("BM", 128, (64, 128), "block tile rows (m)"),
            _p("BN", 64, (64, 128), "block tile columns (n)"),
            _p("BK", 16, (8, 16), "k-slice staged in shared memory"),
            _p("WM", 32, (16, 32, 64), "warp tile rows (whole m16 tiles)"),
            _p("WN", 64, (8, 16, 32, 64), "warp tile columns (whole n8 tiles)"),
            _MIN_BLOCKS),
    derived=(("THREADS", "32 * (BM // WM) * (BN // WN)"),),
    rules=(_WARPS_COVER_BLOCK, _THREADS_FIT, _FLOAT4_LOADS_SHARED),
    block="(THREADS,)", grid="(cdiv(M, BM), cdiv(N, BN))", smem="2 * (BK * (BM + 8) + BK * (BN + 8)) * 4",
)

# Kernels that run step 8's mainloop under an epilogue of their own: a 64 x 64 warp tile spills there.
_TF32X3_FUSED = dict(_TF32X3, params=tuple(replace(p, choices=(16, 32)) if p.name == "WM" else p
                                           for p in _TF32X3["params"]))

_PRECISION_HELP = "TF32 products per term (3: 3xTF32, 1: TF32), fixed by the variant"
# Step 9 (sm_90a): BM/64 consumer warpgroups and one producer warpgroup; a stage holds the A tile
# (rows padded by 8 floats) and the B tile, twice for 3xTF32 (big and small).
_WGMMA = dict(
    params=(_p("BM", 128, (64, 128), "block tile rows: 64 per consumer warpgroup"),
            _p("BN", 128, (64, 128), "block tile columns: the wgmma's n"),
            _p("BK", 32, (32,), "k-slice per stage: one 128-byte swizzle row of TF32"),
            _p("STAGES", 4, (2, 3, 4, 5, 6), "depth of the shared-memory ring the producer fills"),
            _p("ADAPT", 1, (0, 1), "1: the host picks BN and split-K per shape (suites/gemm.py, step9_tile), and "
               "for GEMM step 9 the transposed kernel where M <= 128 and N >= 2048 (wide_plan); 0: BN as given "
               "everywhere, the main kernel always")),
    derived=(("CONSUMERS", "BM // 64"), ("THREADS", "128 * (CONSUMERS + 1)"),
             ("B_COPIES", "(PRECISION + 1) // 2")),
    block="(THREADS,)", grid="(cdiv(M, BM), cdiv(N, BN))",
    dynamic_smem="STAGES * (BK * (BM + 8) + B_COPIES * BN * BK) * 4 + 24 * STAGES + 1024",
    arch="sm_90a",
    tensor_maps=(TensorMap("A", ("BM + 8", "BK")), TensorMap("B", ("BK", "BN"), swizzle=128)),
    split_k=True,
)

# GEMM step 9's own launch: thread-block clusters along m sharing B by multicast (the grid's m tiles
# rounded up to whole clusters, B mapped a 1/CLUSTER_M part at a time), and a persistent tile loop.
_WGMMA_GEMM = dict(
    _WGMMA,
    params=_WGMMA["params"] + (
        _p("CLUSTER_M", 1, (1, 2), "blocks per thread-block cluster along m: they share each B tile, copied once "
           "from L2 and multicast (1.8% slower at 4096^3 on the H100)"),
        _p("PERSISTENT", 0, (0, 1), "1: one block per SM loops over the tiles (the next tile's copies overlap "
           "this tile's last k-blocks and epilogue; 4.6% slower at 4096^3 on the H100); 0: one block per tile"),
        _p("SPLIT_K", 0, (0, 1, 2, 4, 8, 16, 32, 64), "slices of K (host side): 0 lets the host pick (where the "
           "tiles fill less than half the SMs); n asks for n, fewer where the SMs or the k-blocks run out")),
    grid="(cdiv(cdiv(M, BM), CLUSTER_M) * CLUSTER_M, cdiv(N, BN))",
    tensor_maps=(TensorMap("A", ("BM + 8", "BK")), TensorMap("B", ("BK", "BN // CLUSTER_M"), swizzle=128)),
)

GEMM: tuple[Variant, ...] = (
    Variant(
        "gemm", "naive", 1, "one thread per C element, operands from global memory",
        "gemm/01_naive.cu",
        block="(32, 8)", grid="(cdiv(M, 32), cdiv(N, 8))",
    ),
    Variant(
        "gemm", "tiled", 2, "shared-memory tiling, the seed's GEMM1",
        "gemm/02_tiled.cu",
        params=(_p("TS", 32, (8, 16, 32), "tile edge; TS*TS threads per block"),),
        block="(TS, TS)", grid="(cdiv(M, TS), cdiv(N, TS))", smem="2 * TS * TS * 4",
    ),
    Variant(
        "gemm", "coarsened", 3, "thread coarsening, the seed's GEMM2: WPT outputs per thread",
        "gemm/03_coarsened.cu",
        params=(_p("TS", 32, (16, 32, 64), "tile edge"),
                _p("WPT", 8, (1, 2, 4, 8, 16, 32), "work per thread (outputs along n)")),
        rules=(Rule("TS % WPT == 0", "WPT must divide TS"),
               Rule("TS * TS // WPT <= 1024", "at most 1024 threads per block")),
        block="(TS, TS // WPT)", grid="(cdiv(M, TS), cdiv(N, TS))", smem="2 * TS * TS * 4",
    ),
    Variant(
        "gemm", "register_2d", 4, "2D register blocking: a WPTM x WPTN outer product per thread",
        "gemm/04_register_2d.cu",
        params=(_p("TSM", 128, (32, 64, 128), "block tile rows"),
                _p("TSN", 128, (32, 64, 128), "block tile columns"),
                _p("TSK", 8, (8, 16, 32), "k-slice staged in shared memory"),
                _p("WPTM", 8, (2, 4, 8), "outputs per thread along m"),
                _p("WPTN", 8, (2, 4, 8), "outputs per thread along n")),
        derived=(("THREADS", "(TSM // WPTM) * (TSN // WPTN)"),),
        rules=(Rule("THREADS <= 1024", "at most 1024 threads per block"),
               Rule("(TSM * TSK) % THREADS == 0 and (TSK * TSN) % THREADS == 0",
                    "threads must share the tile loads evenly")),
        block="(TSM // WPTM, TSN // WPTN)", grid="(cdiv(M, TSM), cdiv(N, TSN))",
        smem="(TSK * TSM + TSK * (TSN + 1)) * 4",
    ),
    Variant(
        "gemm", "vectorized", 5, "float4 global and shared accesses, B transposed into shared memory",
        "gemm/05_vectorized.cu",
        params=(_p("TSM", 128, (64, 128), "block tile rows"),
                _p("TSN", 128, (64, 128), "block tile columns"),
                _p("TSK", 8, (8, 16, 32), "k-slice staged in shared memory"),
                _p("WPTM", 8, (4, 8), "outputs per thread along m"),
                _p("WPTN", 8, (4, 8), "outputs per thread along n")),
        derived=(("THREADS", "(TSM // WPTM) * (TSN // WPTN)"),),
        rules=(Rule("THREADS <= 1024", "at most 1024 threads per block"),
               Rule("(TSM * TSK // 4) % THREADS == 0 and (TSN * TSK // 4) % THREADS == 0",
                    "threads must share the tile's float4 loads evenly")),
        block="(THREADS,)", grid="(cdiv(M, TSM), cdiv(N, TSN))",
        smem="(TSK * TSM + TSK * (TSN + 4)) * 4",
    ),
    Variant(
        "gemm", "warptile", 6, "hierarchical block / warp / thread tiling (CME 213)",
        "gemm/06_warptile.cu",
        params=_WARPTILE_PARAMS, derived=_WARPTILE_DERIVED, rules=_WARPTILE_RULES,
        block="(THREADS,)", grid="(cdiv(M, BM), cdiv(N, BN))", smem="(BK * BM + BK * (BN + 4)) * 4",
    ),
    Variant(
        "gemm", "double_buffered", 7, "warp tiling with two shared stages, next tile prefetched into registers",
        "gemm/07_double_buffered.cu",
        params=(*_WARPTILE_PARAMS, replace(_MIN_BLOCKS, default=2)),
        derived=_WARPTILE_DERIVED, rules=_WARPTILE_RULES,
        block="(THREADS,)", grid="(cdiv(M, BM), cdiv(N, BN))", smem="2 * (BK * BM + BK * (BN + 4)) * 4",
    ),
    Variant(
        "gemm", "tf32x3", 8, "3xTF32 split-precision tensor cores (mma.sync), fp32-level accuracy",
        "gemm/08_tf32x3.cu", tags=("tensor-core",), precision=TF32X3, **_TF32X3,
    ),
    Variant(
        "gemm", "tf32x3_wgmma", 9, "3xTF32 on Hopper's path: bulk tensor copies, warp-specialized producer and "
        "consumers, wgmma (sm_90a), fp32-level accuracy", "gemm/09_tf32x3_wgmma.cu", tags=("tensor-core", "sm_90a"),
        precision=TF32X3,
        **dict(_WGMMA_GEMM, params=_WGMMA_GEMM["params"] + (_p("PRECISION", 3, (3,), _PRECISION_HELP),)),
    ),
    Variant(
        "gemm", "tf32_wgmma", 9, "step 9 with one TF32 product (PRECISION=1): TF32 accuracy, not fp32's",
        "gemm/09_tf32x3_wgmma.cu", tags=("tensor-core", "sm_90a", "tf32"), precision=TF32,
        **dict(_WGMMA_GEMM, params=_WGMMA_GEMM["params"] + (_p("PRECISION", 1, (1,), _PRECISION_HELP),)),
        rtol=TF32_RTOL,  # TF32's own limit (nnbench/measure.py says why)
    ),
    Variant(
        "gemm", "numpy", 0, "NumPy float32 matmul (the host BLAS): the CPU path",
        None, backend="cpu", runner="numpy", precision=HOST,
    ),
)

# The MLP versions of the seed's study (kernels_cu/mlp/). Launch geometry depends on each layer's
# width n, so block and grid are given for one layer's forward pass; nnbench/suites/mlp.py builds
# the whole iteration (forward, deltas, updates) from the version's kernels and tags:
#   kcm  = the momentum and rate updates merged into one kernel;  mass = one block per neuron;
#   fused = every iteration in one launch (its grid, one block per SM by default, is chosen at run
#           time by nnbench/suites/fused.py, so `grid` here is only a placeholder);
#   tagged = the blocks exchange tagged values instead of meeting at grid barriers;
#   columns = each block keeps the weight columns its deltas need, so the deltas travel whole.
_NEURON_GRID = dict(block="(THREADS,)", grid="(cdiv(n, THREADS),)", runner="launches")
_MASS_GRID = dict(block="(MASS_THREADS,)", grid="(n,)", runner="launches")
_MASS_THREADS = _p("MASS_THREADS", 128, (32, 64, 128, 256, 512), "threads per neuron's block")
_TAGGED_PARAMS = (_p("THREADS", 512, (128, 256, 512, 1024), "threads per block"),
                  _p("IN_FLIGHT", 2, (1, 2, 4, 8), "tagged loads a thread issues before it waits"),
                  _p("QUIET", 1, (0, 1), "1: nobody polls until the block's work of the phase is done"))
MLP: tuple[Variant, ...] = (
    Variant("mlp", "sequential", 0, "NumPy float32 on the host, per sample, a BLAS matrix-vector product per layer",
            None, backend="cpu", runner="sequential", precision=HOST),
    Variant("mlp", "simple", 1, "one thread per neuron in one-thread blocks", "mlp/01_neuron_per_thread.cu",
            params=(_p("THREADS", 1, (1,), "threads per block"),), **_NEURON_GRID),
    Variant("mlp", "warped-good", 2, "one thread per neuron in 32-thread blocks (whole warps)",
            "mlp/01_neuron_per_thread.cu", params=(_p("THREADS", 32, (32, 64, 128, 256), "threads per block"),),
            **_NEURON_GRID),
    Variant("mlp", "warped-bad", 3, "one thread per neuron in 50-thread blocks (a warp and a ragged half)",
            "mlp/01_neuron_per_thread.cu", params=(_p("THREADS", 50, (50, 100, 200), "threads per block"),),
            **_NEURON_GRID),
    Variant("mlp", "kcm", 4, "warped-good with the momentum and rate updates merged into one kernel",
            "mlp/04_kcm.cu", params=(_p("THREADS", 32, (1, 32, 64, 128, 256), "threads per block (1: simple's "
                                        "blocks, the same trajectory bit for bit, faster)"),),
            tags=("kcm",), **_NEURON_GRID),
    Variant("mlp", "mass", 5, "one block per neuron, one thread per weight, shared-memory reduction",
            "mlp/05_mass.cu", params=(_MASS_THREADS,), tags=("mass",), **_MASS_GRID),
    Variant("mlp", "kcm-mass", 6, "mass with the merged update", "mlp/06_kcm_mass.cu", params=(_MASS_THREADS,),
            tags=("kcm", "mass"), **_MASS_GRID),
    Variant("mlp", "fused-barrier", 7, "one persistent kernel for many iterations: grid barriers, weights in "
            "shared memory", "mlp/07_fused.cu",
            params=(_p("THREADS", 256, (128, 256, 512, 1024), "threads per block"),
                    _p("BARRIER", 0, (0, 1), "grid barrier: 0 one counter, 1 a flag per block")),
            tags=("fused",), block="(THREADS,)", grid="(1,)", runner="fused"),
    Variant("mlp", "fused-partials", 8, "fused-barrier with the barriers merged into the data: every value stored "
            "with its iteration's tag and polled, per-block partial delta sums", "mlp/08_fused_tagged.cu",
            params=_TAGGED_PARAMS, tags=("fused", "tagged"), block="(THREADS,)", grid="(1,)", runner="fused"),
    Variant("mlp", "fused", 9, "fused-partials with the deltas broadcast like the outputs: each block keeps the "
            "weight columns its deltas need (in L2, in registers by the wait), so a backward phase is a local dot",
            "mlp/09_fused_columns.cu",
            params=(replace(_TAGGED_PARAMS[0], default=256), replace(_TAGGED_PARAMS[1], default=1)) + _TAGGED_PARAMS[2:]
            + (_p("COL_REGS", 16, (8, 16), "a column of up to 32 x COL_REGS weights is held in a warp's registers"),
               _p("POLLERS", 4, (2, 4, 6), "warps that poll for the deltas while the others update"),
               _p("FAST_SIGMOID", 1, (0, 1), "1: the forward's sigmoid with an approximate reciprocal (1 / (1 + e) "
                  "to about 2 ulp instead of correctly rounded)"),
               _p("PREV_W", 1, (0, 1), "1: keep each weight's value before the last step instead of its velocity "
                  "(their difference), so a column update stores the new weight alone"),
               _p("OUT_LOCAL", 1, (0, 1), "1: every block holds and computes the whole output layer, so the last "
                  "two layers' deltas need no exchange")),
            tags=("fused", "tagged", "columns"), block="(THREADS,)", grid="(1,)", runner="fused"),
    # Mini-batch training (--batch B; nnbench/suites/batched.py builds each step's launches).
    Variant("mlp", "batched-numpy", 0, "mini-batch, NumPy float32 on the host: a BLAS GEMM per layer and direction",
            None, backend="cpu", tags=("batched",), runner="batched-numpy", precision=HOST),
    Variant("mlp", "batched", 10, "mini-batch as 3xTF32 GEMMs (ladder step 8) with sigmoid and slope fused into "
            "the epilogues, split-K weight gradients", "mlp/10_batched.cu", tags=("batched",), runner="batched",
            precision=TF32X3,
            candidates=tuple(tuple(c.items()) for c in (dict(BK=8), dict(BN=128), dict(BM=64, WN=32))),
            **_TF32X3_FUSED),
    Variant("mlp", "batched-cublas", 11, "mini-batch with cuBLAS SGEMM (CuPy, TF32 off) and the epilogues as "
            "separate passes", "mlp/11_batched_cublas.cu", tags=("batched", "cublas"), runner="batched-cublas"),
    Variant("mlp", "batched-wgmma", 12, "mini-batch on step 9's mainloop (bulk tensor copies, warp-specialized "
            "wgmma 3xTF32, sm_90a) with step 10's fused epilogues and split-K weight gradients; weights "
            "neuron-major and deltas sample-major, so every operand is mapped", "mlp/12_batched_wgmma.cu",
            tags=("batched", "tensor-core", "sm_90a"), runner="batched-wgmma", precision=TF32X3,
            candidates=tuple(tuple(c.items()) for c in (dict(BN=64), dict(BM=64), dict(BM=64, BN=64))),
            **dict(_WGMMA, derived=(("CONSUMERS", "BM // 64"), ("THREADS", "128 * (CONSUMERS + 1)"), ("B_COPIES", "2")),
                   split_k=False)),
)


def _graphed(v: Variant) -> Variant:
    """`v`'s step captured once per batch as one CUDA graph (nnbench/runtime/graph.py) and replayed with
    one launch: the same kernels, parameters and checks; only how the step reaches the GPU differs."""
    return replace(v, name=f"{v.name}-graph", tags=(*v.tags, "graph"),
                   summary=f"{v.summary}; the whole step as one CUDA graph, one launch per step")


MLP += tuple(_graphed(v) for v in MLP if v.runner in ("batched", "batched-cublas", "batched-wgmma"))

# Conv steps 9 and 10 (sm_90a): step 9's mainloop and ring with the operands gathered by the producer;
# the launch geometry depends on the layer (nnbench/suites/conv.py).
_IMPLICIT = dict(
    _WGMMA, params=(replace(_WGMMA["params"][0], default=128), replace(_WGMMA["params"][1], default=64),
                    *(q for q in _WGMMA["params"][2:] if q.name != "ADAPT"),  # GEMM step 9's launch rule only
                    _p("PRODUCER_WGS", 2, (1, 2), "producer warpgroups gathering the operands (one warp per "
                       "scheduler each)")),
    derived=(("CONSUMERS", "BM // 64"), ("THREADS", "128 * (CONSUMERS + PRODUCER_WGS)"),
             ("B_COPIES", "(PRECISION + 1) // 2")),
    # step 9's ring and the split pair's barrier (kernels_cu/conv/implicit_wgmma.cuh, exch_bar)
    dynamic_smem="STAGES * (BK * (BM + 8) + B_COPIES * BN * BK) * 4 + 24 * STAGES + 8 + 1024",
    tensor_maps=(TensorMap("B", ("BK", "BN"), swizzle=128),), split_k=False,
)
# The convolution ladder (kernels_cu/conv/), NCHW fp32; launch geometry depends on the layer, so
# nnbench/suites/conv.py computes it (grid/block here describe the tile for the docs only).
_CONV_TILE = _p("TILE", 16, (8, 16, 32), "outputs per block side (TILE x TILE threads)")
CONV: tuple[Variant, ...] = (
    Variant("conv", "direct", 1, "one thread per output element, inputs and filters from global memory (the seed's)",
            "conv/01_direct.cu", params=(_CONV_TILE,), block="(TILE, TILE)", kernel="conv_forward", runner="direct"),
    Variant("conv", "constant", 2, "direct, filters in constant memory (broadcast to the warp)",
            "conv/02_constant.cu", params=(_CONV_TILE,), block="(TILE, TILE)", kernel="conv_forward",
            runner="constant"),
    Variant("conv", "tiled", 3, "input tile plus halo and KB filters staged in shared memory, KB outputs per thread",
            "conv/03_tiled.cu", params=(replace(_CONV_TILE, choices=(8, 16)),
                                        _p("KB", 8, (4, 8, 16), "output maps per block")),
            derived=(("IN", "(TILE - 1) * 2 + 11"),),
            rules=(Rule("4 * (4 * IN * IN + KB * 4 * 121) <= 49152", "the staged patch and filters must fit in "
                        "48 KiB of static shared memory"),),
            block="(TILE, TILE)", smem="4 * (4 * IN * IN + KB * 4 * 121)", kernel="conv_forward", runner="direct"),
    Variant("conv", "unroll", 4, "unroll (im2col) each image, then ladder step 8's GEMM (3xTF32)",
            "conv/04_unroll.cu", kernel="unroll", runner="unroll", precision=TF32X3),
    Variant("conv", "implicit-wgmma", 9, "implicit GEMM on GEMM step 9's mainloop: the producer warpgroup gathers "
            "the input patches with cp.async (no workspace), filters by bulk tensor copy, wgmma 3xTF32 (sm_90a)",
            "conv/09_implicit_wgmma.cu", kernel="conv_forward", runner="implicit", precision=TF32X3,
            tags=("tensor-core", "sm_90a"), **dict(_IMPLICIT, params=_IMPLICIT["params"] + (
                _p("PRECISION", 3, (3,), _PRECISION_HELP),))),
    Variant("conv", "implicit-wgmma-tf32", 9, "step 9 with one TF32 product (PRECISION=1): TF32 accuracy, not "
            "fp32's", "conv/09_implicit_wgmma.cu", kernel="conv_forward", runner="implicit", precision=TF32,
            tags=("tensor-core", "sm_90a", "tf32"), rtol=TF32_RTOL, **dict(_IMPLICIT, params=_IMPLICIT["params"] + (
                _p("PRECISION", 1, (1,), _PRECISION_HELP),))),
    Variant("conv", "numpy", 0, "NumPy: im2col and a float32 BLAS GEMM per image (the CPU path)", None,
            backend="cpu", runner="numpy", precision=HOST),
    Variant("conv-model", "lenet5", 8, "LeNet-5's whole SGD step (forward, backward, update) on the unroll "
            "path's 3xTF32 GEMMs",
            "conv/08_lenet.cu", kernel="bias_act", runner="lenet", precision=TF32X3),
    Variant("conv-model", "lenet5-implicit", 9, "LeNet-5's whole SGD step with conv1 and conv2 as implicit GEMMs "
            "(conv steps 9 and 10, wgmma 3xTF32, no workspace; sm_90a), the fully connected layers on "
            "nnbench/suites/lenet.py's FC_PATH", "conv/08_lenet.cu", kernel="bias_act", runner="lenet",
            precision=TF32X3, tags=("tensor-core", "sm_90a")),
)
CONV_BACKWARD: tuple[Variant, ...] = (
    Variant("conv-backward", "unroll-backward", 6, "data and filter gradients as 3xTF32 GEMMs on the unrolled input "
            "(split-K filter gradient), col2im gather", "conv/06_unroll_backward.cu", kernel="filter_grad",
            runner="unroll", precision=TF32X3, **_TF32X3_FUSED),
    Variant("conv-backward", "direct-backward", 7, "data gradient by gather, filter gradient one block per weight "
            "(no workspace)", "conv/07_direct_backward.cu",
            params=(_p("THREADS", 256, (128, 256), "threads of a filter-gradient block"),),
            block="(THREADS,)", kernel="filter_grad_direct", runner="direct"),
    Variant("conv-backward", "implicit-wgmma-backward", 10, "data and filter gradients as implicit GEMMs on step 9's "
            "mainloop (gathered operands, no workspace; split-K filter gradient with atomics), wgmma 3xTF32 (sm_90a)",
            "conv/10_implicit_wgmma_backward.cu", kernel="conv_data_grad", runner="implicit", precision=TF32X3,
            tags=("tensor-core", "sm_90a"), **dict(_IMPLICIT, tensor_maps=(), params=_IMPLICIT["params"] + (
                _p("PRECISION", 3, (3,), _PRECISION_HELP),))),
)
POOL: tuple[Variant, ...] = (
    Variant("pool", "avg", 1, "average pooling, one thread per output", "conv/05_pool.cu",
            params=(_p("MODE", 0, (0,), "0 = average"),), kernel="pool_forward"),
    Variant("pool", "max", 2, "max pooling, one thread per output", "conv/05_pool.cu",
            params=(_p("MODE", 1, (1,), "1 = max"),), kernel="pool_forward"),
)

ALL: tuple[Variant, ...] = GEMM + MLP + CONV + CONV_BACKWARD + POOL


def suite_variants(suite: str, backend: str | None = None) -> list[Variant]:
    return [v for v in ALL if v.suite == suite and (backend is None or v.backend == backend)]


def get(suite: str, name: str) -> Variant:
    for v in ALL:
        if v.suite == suite and v.name == name:
            return v
    names = ", ".join(v.name for v in ALL if v.suite == suite)
    raise NnbenchError(f"--variant {name}: unknown {suite} variant; choose from {names}")


def all_param_names(suite: str) -> list[Param]:
    """One Param per distinct name across the suite (the first declaration's help), for the CLI."""
    seen: dict[str, Param] = {}
    for v in suite_variants(suite):
        for p in v.params:
            seen.setdefault(p.name, p)
    return list(seen.values())
