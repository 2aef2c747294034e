"""The GEMM ladder's variants (kernels_cu/gemm/): one numbered step per idea, as data."""

from __future__ import annotations

from dataclasses import replace

from nnbench.measure import TF32_RTOL
from nnbench.registry import (
    MIN_BLOCKS,
    PRECISION_HELP,
    TF32X3_GEMM,
    WARPTILE_DERIVED,
    WARPTILE_PARAMS,
    WARPTILE_RULES,
    WGMMA_GEMM_TILES,
    Rule,
    Variant,
    param,
)
from nnbench.runtime.device import HOST, TF32, TF32X3

GEMM: tuple[Variant, ...] = (
    Variant(
        "gemm", "naive", 1, "one thread per C element, operands from global memory",
        "gemm/01_naive.cu",
        block="(32, 8)", grid="(cdiv(M, 32), cdiv(N, 8))",
    ),
    Variant(
        "gemm", "tiled", 2, "shared-memory tiling, the seed's GEMM1",
        "gemm/02_tiled.cu",
        params=(param("TS", 32, (8, 16, 32), "tile edge; TS*TS threads per block"),),
        block="(TS, TS)", grid="(cdiv(M, TS), cdiv(N, TS))", smem="2 * TS * TS * 4",
    ),
    Variant(
        "gemm", "coarsened", 3, "thread coarsening, the seed's GEMM2: WPT outputs per thread",
        "gemm/03_coarsened.cu",
        params=(param("TS", 32, (16, 32, 64), "tile edge"),
                param("WPT", 8, (1, 2, 4, 8, 16, 32), "work per thread (outputs along n)")),
        rules=(Rule("TS % WPT == 0", "WPT must divide TS"),
               Rule("TS * TS // WPT <= 1024", "at most 1024 threads per block")),
        block="(TS, TS // WPT)", grid="(cdiv(M, TS), cdiv(N, TS))", smem="2 * TS * TS * 4",
    ),
    Variant(
        "gemm", "register_2d", 4, "2D register blocking: a WPTM x WPTN outer product per thread",
        "gemm/04_register_2d.cu",
        params=(param("TSM", 128, (32, 64, 128), "block tile rows"),
                param("TSN", 128, (32, 64, 128), "block tile columns"),
                param("TSK", 8, (8, 16, 32), "k-slice staged in shared memory"),
                param("WPTM", 8, (2, 4, 8), "outputs per thread along m"),
                param("WPTN", 8, (2, 4, 8), "outputs per thread along n")),
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
        params=(param("TSM", 128, (64, 128), "block tile rows"),
                param("TSN", 128, (64, 128), "block tile columns"),
                param("TSK", 8, (8, 16, 32), "k-slice staged in shared memory"),
                param("WPTM", 8, (4, 8), "outputs per thread along m"),
                param("WPTN", 8, (4, 8), "outputs per thread along n")),
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
        params=WARPTILE_PARAMS, derived=WARPTILE_DERIVED, rules=WARPTILE_RULES,
        block="(THREADS,)", grid="(cdiv(M, BM), cdiv(N, BN))", smem="(BK * BM + BK * (BN + 4)) * 4",
    ),
    Variant(
        "gemm", "double_buffered", 7, "warp tiling with two shared stages, next tile prefetched into registers",
        "gemm/07_double_buffered.cu",
        params=(*WARPTILE_PARAMS, replace(MIN_BLOCKS, default=2)),
        derived=WARPTILE_DERIVED, rules=WARPTILE_RULES,
        block="(THREADS,)", grid="(cdiv(M, BM), cdiv(N, BN))", smem="2 * (BK * BM + BK * (BN + 4)) * 4",
    ),
    TF32X3_GEMM,  # step 8: shared with conv and LeNet-5 (nnbench/registry.py)
    Variant(
        "gemm", "tf32x3_wgmma", 9, "3xTF32 on Hopper's path: bulk tensor copies, warp-specialized producer and "
        "consumers, wgmma (sm_90a), fp32-level accuracy", "gemm/09_tf32x3_wgmma.cu", tags=("tensor-core", "sm_90a"),
        precision=TF32X3,
        **dict(WGMMA_GEMM_TILES, params=WGMMA_GEMM_TILES["params"] + (param("PRECISION", 3, (3,), PRECISION_HELP),)),
    ),
    Variant(
        "gemm", "tf32_wgmma", 9, "step 9 with one TF32 product (PRECISION=1): TF32 accuracy, not fp32's",
        "gemm/09_tf32x3_wgmma.cu", tags=("tensor-core", "sm_90a", "tf32"), precision=TF32,
        **dict(WGMMA_GEMM_TILES, params=WGMMA_GEMM_TILES["params"] + (param("PRECISION", 1, (1,), PRECISION_HELP),)),
        rtol=TF32_RTOL,  # TF32's own limit (nnbench/measure.py says why)
    ),
    Variant(
        "gemm", "numpy", 0, "NumPy float32 matmul (the host BLAS): the CPU path",
        None, backend="cpu", runner="numpy", precision=HOST,
    ),
)

VARIANTS = GEMM
