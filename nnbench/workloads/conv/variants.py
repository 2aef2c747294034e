"""The convolution paths (kernels_cu/conv/): forward, backward, pooling and LeNet-5, as data."""

from __future__ import annotations

from dataclasses import replace

from nnbench.registry import PRECISION_HELP, TF32X3_FUSED_TILES, WGMMA_TILES, Rule, TensorMap, Variant, param
from nnbench.runtime.device import HOST, TF32, TF32X3

# Conv steps 9 and 10 (sm_90a): step 9's mainloop and ring with the operands gathered by the producer;
# the launch geometry depends on the layer (nnbench/workloads/conv/session.py).
_IMPLICIT = dict(
    WGMMA_TILES, params=(replace(WGMMA_TILES["params"][0], default=128), replace(WGMMA_TILES["params"][1], default=64),
                    *(q for q in WGMMA_TILES["params"][2:] if q.name != "ADAPT"),  # GEMM step 9's launch rule only
                    param("PRODUCER_WGS", 2, (1, 2), "producer warpgroups gathering the operands (one warp per "
                       "scheduler each)")),
    derived=(("CONSUMERS", "BM // 64"), ("THREADS", "128 * (CONSUMERS + PRODUCER_WGS)"),
             ("B_COPIES", "(PRECISION + 1) // 2")),
    # step 9's ring and the split pair's barrier (kernels_cu/conv/implicit_wgmma.cuh, exch_bar)
    dynamic_smem="STAGES * (BK * (BM + 8) + B_COPIES * BN * BK) * 4 + 24 * STAGES + 8 + 1024",
    tensor_maps=(TensorMap("B", ("BK", "BN"), swizzle=128),), split_k=False,
)
# The convolution ladder (kernels_cu/conv/), NCHW fp32; launch geometry depends on the layer, so
# nnbench/workloads/conv/session.py computes it (grid/block here describe the tile for the docs only).
_CONV_TILE = param("TILE", 16, (8, 16, 32), "outputs per block side (TILE x TILE threads)")
CONV: tuple[Variant, ...] = (
    Variant("conv", "direct", 1, "one thread per output element, inputs and filters from global memory (the seed's)",
            "conv/01_direct.cu", params=(_CONV_TILE,), block="(TILE, TILE)", kernel="conv_forward",
            runner="direct", kind="forward"),
    Variant("conv", "constant", 2, "direct, filters in constant memory (broadcast to the warp)",
            "conv/02_constant.cu", params=(_CONV_TILE,), block="(TILE, TILE)", kernel="conv_forward",
            runner="constant", kind="forward"),
    Variant("conv", "tiled", 3, "input tile plus halo and KB filters staged in shared memory, KB outputs per thread",
            "conv/03_tiled.cu", params=(replace(_CONV_TILE, choices=(8, 16)),
                                        param("KB", 8, (4, 8, 16), "output maps per block")),
            derived=(("IN", "(TILE - 1) * 2 + 11"),),
            rules=(Rule("4 * (4 * IN * IN + KB * 4 * 121) <= 49152", "the staged patch and filters must fit in "
                        "48 KiB of static shared memory"),),
            block="(TILE, TILE)", smem="4 * (4 * IN * IN + KB * 4 * 121)", kernel="conv_forward",
            runner="direct", kind="forward"),
    Variant("conv", "unroll", 4, "unroll (im2col) each image, then ladder step 8's GEMM (3xTF32)",
            "conv/04_unroll.cu", kernel="unroll", runner="unroll", precision=TF32X3, kind="forward"),
    Variant("conv", "implicit-wgmma", 9, "implicit GEMM on GEMM step 9's mainloop: the producer warpgroup gathers "
            "the input patches with cp.async (no workspace), filters by bulk tensor copy, wgmma 3xTF32 (sm_90a)",
            "conv/09_implicit_wgmma.cu", kernel="conv_forward", runner="implicit", precision=TF32X3,
            tags=("tensor-core", "sm_90a"), **dict(_IMPLICIT, params=_IMPLICIT["params"] + (
                param("PRECISION", 3, (3,), PRECISION_HELP),)), kind="forward"),
    Variant("conv", "implicit-wgmma-tf32", 9, "step 9 with one TF32 product (PRECISION=1): TF32 accuracy, not "
            "fp32's", "conv/09_implicit_wgmma.cu", kernel="conv_forward", runner="implicit", precision=TF32,
            tags=("tensor-core", "sm_90a", "tf32"), **dict(_IMPLICIT, params=_IMPLICIT["params"] + (
                param("PRECISION", 1, (1,), PRECISION_HELP),)), kind="forward"),
    Variant("conv", "numpy", 0, "NumPy: im2col and a float32 BLAS GEMM per image (the CPU path)", None,
            backend="cpu", runner="numpy", precision=HOST, kind="forward"),
    Variant("conv", "lenet5", 8, "LeNet-5's whole SGD step (forward, backward, update) on the unroll "
            "path's 3xTF32 GEMMs",
            "conv/08_lenet.cu", kernel="bias_act", runner="lenet", precision=TF32X3, kind="model"),
    Variant("conv", "lenet5-implicit", 8, "LeNet-5's whole SGD step with conv1 and conv2 as implicit GEMMs "
            "(conv steps 9 and 10, wgmma 3xTF32, no workspace; sm_90a), the fully connected layers on "
            "nnbench/workloads/conv/lenet.py's FC_PATH", "conv/08_lenet.cu", kernel="bias_act", runner="lenet",
            precision=TF32X3, tags=("tensor-core", "sm_90a"), kind="model"),
)
CONV_BACKWARD: tuple[Variant, ...] = (
    Variant("conv", "unroll-backward", 6, "data and filter gradients as 3xTF32 GEMMs on the unrolled input "
            "(split-K filter gradient), col2im gather", "conv/06_unroll_backward.cu", kernel="filter_grad",
            runner="unroll", precision=TF32X3, **TF32X3_FUSED_TILES, kind="backward"),
    Variant("conv", "direct-backward", 7, "data gradient by gather, filter gradient one block per weight "
            "(no workspace)", "conv/07_direct_backward.cu",
            params=(param("THREADS", 256, (128, 256), "threads of a filter-gradient block"),),
            block="(THREADS,)", kernel="filter_grad_direct", runner="direct", kind="backward"),
    Variant("conv", "implicit-wgmma-backward", 10, "data and filter gradients as implicit GEMMs on step 9's "
            "mainloop (gathered operands, no workspace; split-K filter gradient with atomics), wgmma 3xTF32 (sm_90a)",
            "conv/10_implicit_wgmma_backward.cu", kernel="conv_data_grad", runner="implicit", precision=TF32X3,
            tags=("tensor-core", "sm_90a"), **dict(_IMPLICIT, tensor_maps=(), params=_IMPLICIT["params"] + (
                param("PRECISION", 3, (3,), PRECISION_HELP),)), kind="backward"),
)
POOL: tuple[Variant, ...] = (
    Variant("conv", "avg", 5, "average pooling, one thread per output", "conv/05_pool.cu",
            params=(param("MODE", 0, (0,), "0 = average"),), kernel="pool_forward", kind="pool"),
    Variant("conv", "max", 5, "max pooling, one thread per output", "conv/05_pool.cu",
            params=(param("MODE", 1, (1,), "1 = max"),), kernel="pool_forward", kind="pool"),
)

VARIANTS = CONV + CONV_BACKWARD + POOL
