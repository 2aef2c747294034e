"""Every kernel variant nnbench can run, described once, as data.

The CLI builds its options from this table, sweeps expand its parameters, tests compile and verify
every entry, and the docs list it. Constraints, launch geometry and shared-memory footprints are
expressions in `nnbench.expr`'s safe language over the parameters and the shape (M, N, K), so the
same text can be checked before compiling, printed in an error, and read in the docs.

GEMM layout, for the whole ladder: column-major, C = alpha*A*B + beta*C with A (M x K), B (K x N),
C (M x N), A(m, k) = A[m + k*M], as in cuBLAS and the seed lecture.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace

from nnbench import expr
from nnbench.errors import NnbenchError
from nnbench.runtime.device import FFMA, TF32X3


@dataclass(frozen=True)
class Param:
    name: str  # the -D macro, named as the seeds and their sources name it (TS, WPT, TSM, ...)
    default: int
    choices: tuple[int, ...]
    help: str

    @property
    def option(self) -> str:
        return "--" + self.name.lower().replace("_", "-")

    @functools.cached_property
    def allowed(self) -> frozenset[int]:
        """`choices` as a set: a kernel config's axis may hold 10^3 values, looked up at each of 10^6 points."""
        return frozenset(self.choices)


@dataclass(frozen=True)
class Rule:
    expr: str  # must hold (true) for a valid parameter set
    why: str


@dataclass(frozen=True)
class TensorMap:
    """A bulk-tensor-copy map the host encodes for one operand (nnbench/runtime/tensormap.py): the box
    one copy moves (innermost first, expressions over the params) and its swizzle in bytes. The
    workload knows the operand's sizes and leading dimension; where the map is not allowed (a leading
    dimension breaking the 16-byte stride rule) the kernel takes its fallback path for that operand."""

    operand: str
    box: tuple[str, str]
    swizzle: int = 0


@dataclass(frozen=True)
class Variant:
    workload: str  # the package under nnbench/workloads/ that runs it, the record's `workload`
    name: str  # unique within its workload
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
    # Which of its workload's host runners executes it (the workload dispatches on this, never on the name):
    # gemm: kernel | numpy; train: sequential | launches | fused | batched-numpy | batched | batched-cublas |
    # batched-wgmma;
    # conv: direct | constant | unroll | implicit | numpy | lenet (forward, model), unroll | direct | implicit
    # (backward), pool (pool).
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
    # The finer split within a workload, where it has one: conv's forward | backward | pool | model, train's
    # per-sample | mini-batch; "" for gemm and a user's kernel. It selects (the conv command's --backward, the
    # sweepable variants), it is never part of a record or a case key: a variant's name is unique in its workload.
    kind: str = ""

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
            if params.get(p.name) not in p.allowed:
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
        env = self.env(params)
        return _dim3(expr.evaluate(self.block, env), self.block, env)

    def launch_grid(self, params: dict[str, int], shape: dict[str, int]) -> tuple[int, int, int]:
        env = self.env(params, shape)
        return _dim3(expr.evaluate(self.grid, env), self.grid, env)

    def smem_bytes(self, params: dict[str, int]) -> int:
        return expr.evaluate_whole(self.smem, self.env(params))

    def dynamic_smem_bytes(self, params: dict[str, int]) -> int:
        return expr.evaluate_whole(self.dynamic_smem, self.env(params))

    def map_box(self, tmap: TensorMap, params: dict[str, int]) -> tuple[int, ...]:
        env = self.env(params)
        return tuple(int(expr.evaluate(b, env)) for b in tmap.box)


def _fmt(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def _dim3(t, text: str, env: dict) -> tuple[int, int, int]:
    t = t if isinstance(t, tuple) else (t,)
    if len(t) > 3:  # CUDA's dim3 has x, y and z: a fourth number is a mistake, not something to cut off
        raise ValueError(f"{text} gives {len(t)} numbers; a launch takes (x, y, z)")
    t = tuple(expr.whole(x, text, env) for x in t)
    return (t + (1, 1, 1))[:3]  # type: ignore[return-value]


def param(name: str, default: int, choices: tuple[int, ...], help: str) -> Param:
    return Param(name, default, choices, help)


WARPTILE_PARAMS = (
    param("BM", 128, (64, 128, 256), "block tile rows (m)"),
    param("BN", 128, (64, 128, 256), "block tile columns (n)"),
    param("BK", 16, (8, 16, 32), "k-slice staged in shared memory"),
    param("WM", 64, (16, 32, 64, 128), "warp tile rows"),
    param("WN", 32, (16, 32, 64, 128), "warp tile columns"),
    param("WNITER", 2, (1, 2, 4, 8), "warp sub-tiles along n"),
    param("TM", 8, (4, 8), "thread tile rows"),
    param("TN", 4, (4, 8), "thread tile columns"),
)
MIN_BLOCKS = param("MIN_BLOCKS", 1, (1, 2),
                   "resident blocks per SM asked of the register allocator (__launch_bounds__)")
WARPTILE_DERIVED = (
    ("THREADS", "32 * (BM // WM) * (BN // WN)"),
    ("WMITER", "(WM * WN) // (32 * TM * TN * WNITER)"),
)
# Rules every warp-tiled step shares (steps 6, 7 and 8).
_WARPS_COVER_BLOCK = Rule("BM % WM == 0 and BN % WN == 0", "warp tiles must cover the block tile")
_THREADS_FIT = Rule("THREADS <= 1024", "at most 1024 threads per block")
_FLOAT4_LOADS_SHARED = Rule("(BM * BK // 4) % THREADS == 0 and (BN * BK // 4) % THREADS == 0",
                            "threads must share the tile's float4 loads evenly")
WARPTILE_RULES = (
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
TF32X3_TILES = dict(
    params=(param("BM", 128, (64, 128), "block tile rows (m)"),
            param("BN", 64, (64, 128), "block tile columns (n)"),
            param("BK", 16, (8, 16), "k-slice staged in shared memory"),
            param("WM", 32, (16, 32, 64), "warp tile rows (whole m16 tiles)"),
            param("WN", 64, (8, 16, 32, 64), "warp tile columns (whole n8 tiles)"),
            MIN_BLOCKS),
    derived=(("THREADS", "32 * (BM // WM) * (BN // WN)"),),
    rules=(_WARPS_COVER_BLOCK, _THREADS_FIT, _FLOAT4_LOADS_SHARED),
    block="(THREADS,)", grid="(cdiv(M, BM), cdiv(N, BN))", smem="2 * (BK * (BM + 8) + BK * (BN + 8)) * 4",
)

# Kernels that run step 8's mainloop under an epilogue of their own: a 64 x 64 warp tile spills there.
TF32X3_FUSED_TILES = dict(TF32X3_TILES, params=tuple(replace(p, choices=(16, 32)) if p.name == "WM" else p
                                           for p in TF32X3_TILES["params"]))

PRECISION_HELP = "TF32 products per term (3: 3xTF32, 1: TF32), fixed by the variant"
# Step 9 (sm_90a): BM/64 consumer warpgroups and one producer warpgroup; a stage holds the A tile
# (rows padded by 8 floats) and the B tile, twice for 3xTF32 (big and small).
WGMMA_TILES = dict(
    params=(param("BM", 128, (64, 128), "block tile rows: 64 per consumer warpgroup"),
            param("BN", 128, (64, 128), "block tile columns: the wgmma's n"),
            param("BK", 32, (32,), "k-slice per stage: one 128-byte swizzle row of TF32"),
            param("STAGES", 4, (2, 3, 4, 5, 6), "depth of the shared-memory ring the producer fills"),
            param("ADAPT", 1, (0, 1), "1: the host picks BN and split-K per shape (workloads/gemm.py, step9_tile), and "
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
WGMMA_GEMM_TILES = dict(
    WGMMA_TILES,
    params=WGMMA_TILES["params"] + (
        param("CLUSTER_M", 1, (1, 2), "blocks per thread-block cluster along m: they share each B tile, copied once "
           "from L2 and multicast (1.8% slower at 4096^3 on the H100)"),
        param("PERSISTENT", 0, (0, 1), "1: one block per SM loops over the tiles (the next tile's copies overlap "
           "this tile's last k-blocks and epilogue; 4.6% slower at 4096^3 on the H100); 0: one block per tile"),
        param("SPLIT_K", 0, (0, 1, 2, 4, 8, 16, 32, 64), "slices of K (host side): 0 lets the host pick (where the "
           "tiles fill less than half the SMs); n asks for n, fewer where the SMs or the k-blocks run out"),
        param("SPLIT_B", 0, (0, 1), "where B is split into TF32 big and small: 0 in the shared-memory ring by the "
           "producer, every tile; 1 once per launch into a workspace in global memory by a kernel launched first "
           "(`split_b`), both copies then coming by the copy engine (the transposed path keeps its own)")),
    grid="(cdiv(cdiv(M, BM), CLUSTER_M) * CLUSTER_M, cdiv(N, BN))",
    tensor_maps=(TensorMap("A", ("BM + 8", "BK")), TensorMap("B", ("BK", "BN // CLUSTER_M"), swizzle=128)),
)


def of_workload(variants, workload: str, backend: str | None = None, kinds: tuple[str, ...] | None = None
                ) -> list[Variant]:
    """The variants of one workload, on one backend, of some kinds (None: any of each)."""
    return [v for v in variants if v.workload == workload and (backend is None or v.backend == backend)
            and (kinds is None or v.kind in kinds)]


def find(variants, workload: str, name: str) -> Variant:
    for v in variants:
        if v.workload == workload and v.name == name:
            return v
    names = ", ".join(v.name for v in variants if v.workload == workload)
    raise NnbenchError(f"--variant {name}: unknown {workload} variant; choose from {names}")


def param_union(variants) -> list[Param]:
    """One Param per distinct name across the variants (the first declaration's help), for the CLI."""
    seen: dict[str, Param] = {}
    for v in variants:
        for p in v.params:
            seen.setdefault(p.name, p)
    return list(seen.values())


# GEMM ladder step 8 (3xTF32 on mma.sync): a step of the gemm workload, and the GEMM that the
# convolution's unroll path and LeNet-5 borrow through nnbench/runtime/ladder_gemm.py. Declared here,
# below every workload, so that none of them imports another for it.
TF32X3_GEMM = Variant(
    "gemm", "tf32x3", 8, "3xTF32 split-precision tensor cores (mma.sync), fp32-level accuracy",
    "gemm/08_tf32x3.cu", tags=("tensor-core",), precision=TF32X3, **TF32X3_TILES,
)
