"""The MLP trainer's versions (kernels_cu/mlp/): per sample, fused, and mini-batch, as data."""

from __future__ import annotations

from dataclasses import replace

from nnbench.registry import TF32X3_FUSED_TILES, WGMMA_TILES, Variant, param
from nnbench.runtime.device import HOST, TF32X3

# The MLP versions of the seed's study (kernels_cu/mlp/). Launch geometry depends on each layer's
# width n, so block and grid are given for one layer's forward pass; nnbench/workloads/train/mlp.py builds
# the whole iteration (forward, deltas, updates) from the version's kernels and tags:
#   kcm  = the momentum and rate updates merged into one kernel;  mass = one block per neuron;
#   fused = every iteration in one launch (its grid, one block per SM by default, is chosen at run
#           time by nnbench/workloads/train/fused.py, so `grid` here is only a placeholder);
#   tagged = the blocks exchange tagged values instead of meeting at grid barriers;
#   columns = each block keeps the weight columns its deltas need, so the deltas travel whole.
_NEURON_GRID = dict(block="(THREADS,)", grid="(cdiv(n, THREADS),)", runner="launches")
_MASS_GRID = dict(block="(MASS_THREADS,)", grid="(n,)", runner="launches")
_MASS_THREADS = param("MASS_THREADS", 128, (32, 64, 128, 256, 512), "threads per neuron's block")
_TAGGED_PARAMS = (param("THREADS", 512, (128, 256, 512, 1024), "threads per block"),
                  param("IN_FLIGHT", 2, (1, 2, 4, 8), "tagged loads a thread issues before it waits"),
                  param("QUIET", 1, (0, 1), "1: nobody polls until the block's work of the phase is done"))
MLP: tuple[Variant, ...] = (
    Variant("train", "sequential", 0, "NumPy float32 on the host, per sample, a BLAS matrix-vector product per layer",
            None, backend="cpu", runner="sequential", precision=HOST, kind="per-sample"),
    Variant("train", "simple", 1, "one thread per neuron in one-thread blocks", "mlp/01_neuron_per_thread.cu",
            params=(param("THREADS", 1, (1,), "threads per block"),), **_NEURON_GRID, kind="per-sample"),
    Variant("train", "warped-good", 1, "one thread per neuron in 32-thread blocks (whole warps)",
            "mlp/01_neuron_per_thread.cu", params=(param("THREADS", 32, (32, 64, 128, 256), "threads per block"),),
            **_NEURON_GRID, kind="per-sample"),
    Variant("train", "warped-bad", 1, "one thread per neuron in 50-thread blocks (a warp and a ragged half)",
            "mlp/01_neuron_per_thread.cu", params=(param("THREADS", 50, (50, 100, 200), "threads per block"),),
            **_NEURON_GRID, kind="per-sample"),
    Variant("train", "kcm", 4, "warped-good with the momentum and rate updates merged into one kernel",
            "mlp/04_kcm.cu", params=(param("THREADS", 32, (1, 32, 64, 128, 256), "threads per block (1: simple's "
                                        "blocks, the same trajectory bit for bit, faster)"),),
            tags=("kcm",), **_NEURON_GRID, kind="per-sample"),
    Variant("train", "mass", 5, "one block per neuron, one thread per weight, shared-memory reduction",
            "mlp/05_mass.cu", params=(_MASS_THREADS,), tags=("mass",), **_MASS_GRID, kind="per-sample"),
    Variant("train", "kcm-mass", 6, "mass with the merged update", "mlp/06_kcm_mass.cu", params=(_MASS_THREADS,),
            tags=("kcm", "mass"), **_MASS_GRID, kind="per-sample"),
    Variant("train", "fused-barrier", 7, "one persistent kernel for many iterations: grid barriers, weights in "
            "shared memory", "mlp/07_fused.cu",
            params=(param("THREADS", 256, (128, 256, 512, 1024), "threads per block"),
                    param("BARRIER", 0, (0, 1), "grid barrier: 0 one counter, 1 a flag per block")),
            tags=("fused",), block="(THREADS,)", grid="(1,)", runner="fused", kind="per-sample"),
    Variant("train", "fused-partials", 8, "fused-barrier with the barriers merged into the data: every value stored "
            "with its iteration's tag and polled, per-block partial delta sums", "mlp/08_fused_tagged.cu",
            params=_TAGGED_PARAMS, tags=("fused", "tagged"), block="(THREADS,)", grid="(1,)", runner="fused",
            kind="per-sample"),
    Variant("train", "fused", 9, "fused-partials with the deltas broadcast like the outputs: each block keeps the "
            "weight columns its deltas need (in L2, in registers by the wait), so a backward phase is a local dot",
            "mlp/09_fused_columns.cu",
            params=(replace(_TAGGED_PARAMS[0], default=256), replace(_TAGGED_PARAMS[1], default=1)) + _TAGGED_PARAMS[2:]
            + (param("COL_REGS", 16, (8, 16), "a column of up to 32 x COL_REGS weights is held in a warp's registers"),
               param("POLLERS", 4, (2, 4, 6), "warps that poll for the deltas while the others update"),
               param("FAST_SIGMOID", 1, (0, 1), "1: the forward's sigmoid with an approximate reciprocal (1 / (1 + e) "
                  "to about 2 ulp instead of correctly rounded)"),
               param("PREV_W", 1, (0, 1), "1: keep each weight's value before the last step instead of its velocity "
                  "(their difference), so a column update stores the new weight alone"),
               param("OUT_LOCAL", 1, (0, 1), "1: every block holds and computes the whole output layer, so the last "
                  "two layers' deltas need no exchange")),
            tags=("fused", "tagged", "columns"), block="(THREADS,)", grid="(1,)", runner="fused", kind="per-sample"),
    # Mini-batch training (--batch B; nnbench/workloads/train/batched.py builds each step's launches).
    Variant("train", "batched-numpy", 0, "mini-batch, NumPy float32 on the host: a BLAS GEMM per layer and direction",
            None, backend="cpu", tags=("batched",), runner="batched-numpy", precision=HOST, kind="mini-batch"),
    Variant("train", "batched", 10, "mini-batch as 3xTF32 GEMMs (ladder step 8) with sigmoid and slope fused into "
            "the epilogues, split-K weight gradients", "mlp/10_batched.cu", tags=("batched",), runner="batched",
            precision=TF32X3,
            candidates=tuple(tuple(c.items()) for c in (dict(BK=8), dict(BN=128), dict(BM=64, WN=32))),
            **TF32X3_FUSED_TILES, kind="mini-batch"),
    Variant("train", "batched-cublas", 11, "mini-batch with cuBLAS SGEMM (CuPy, TF32 off) and the epilogues as "
            "separate passes", "mlp/11_batched_cublas.cu", tags=("batched", "cublas"),
            runner="batched-cublas", kind="mini-batch"),
    Variant("train", "batched-wgmma", 12, "mini-batch on step 9's mainloop (bulk tensor copies, warp-specialized "
            "wgmma 3xTF32, sm_90a) with step 10's fused epilogues and split-K weight gradients; weights "
            "neuron-major and deltas sample-major, so every operand is mapped", "mlp/12_batched_wgmma.cu",
            tags=("batched", "tensor-core", "sm_90a"), runner="batched-wgmma", precision=TF32X3,
            candidates=tuple(tuple(c.items()) for c in (dict(BN=64), dict(BM=64), dict(BM=64, BN=64))),
            **dict(WGMMA_TILES,
                   derived=(("CONSUMERS", "BM // 64"), ("THREADS", "128 * (CONSUMERS + 1)"), ("B_COPIES", "2")),
                   split_k=False), kind="mini-batch"),
)


def _graphed(v: Variant) -> Variant:
    """`v`'s step captured once per batch as one CUDA graph (nnbench/runtime/graph.py) and replayed with
    one launch: the same kernels, parameters and checks; only how the step reaches the GPU differs."""
    return replace(v, name=f"{v.name}-graph", tags=(*v.tags, "graph"),
                   summary=f"{v.summary}; the whole step as one CUDA graph, one launch per step")


MLP += tuple(_graphed(v) for v in MLP if v.runner in ("batched", "batched-cublas", "batched-wgmma"))

VARIANTS = MLP
