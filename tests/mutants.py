"""Test-only defects, kept out of the shipped kernels: a mutant is a copy of kernels_cu/ with a textual patch.

Each defect is a list of `Patch(file, old, new)`: `old` must occur exactly once in the shipped file, so a
change to the kernel that moves or rewrites the patched code fails the test loudly (PatchError) instead of
silently testing nothing. `kernel_root(tmp_path, defect)` writes the mutated tree and points nnbench's kernel
root (`paths.KERNELS`, where the compiler and the sessions look for every source and header) at it for the
duration: the cache is content-addressed, so the mutant gets cubins of its own and the shipped ones are
untouched. The GPU tests compile and run the mutant through the normal path (tests/test_gpu_gemm.py,
test_gpu_gemm_step9.py, test_gpu_conv.py); tests/test_tolerances.py checks on the host that every patch
applies and changes the machine code.
"""

from __future__ import annotations

import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from nnbench import paths


class PatchError(AssertionError):
    pass


@dataclass(frozen=True)
class Patch:
    file: str  # under kernels_cu/
    old: str
    new: str


# rank 1's share of a cluster pair's K (and of a paired split data gradient) never added to rank 0's
PAIR_SUM = Patch("conv/implicit_wgmma.cuh", """#pragma unroll
    for (int r = 0; r < NACC / 4; ++r) {
        const float4 v = ld_cluster_v4(tile + r * 128 * CONSUMERS, 1);
        acc[4 * r] += v.x;
        acc[4 * r + 1] += v.y;
        acc[4 * r + 2] += v.z;
        acc[4 * r + 3] += v.w;
    }
""", "")

DEFECTS: dict[str, tuple[Patch, ...]] = {
    # step 8 drops its last k-tile
    "skip_ktiles": (Patch("gemm/08_tf32x3.cu", "for (int k0 = 0; k0 < K; k0 += BK) {",
                          "for (int k0 = 0; k0 < K - BK; k0 += BK) {"),),
    # step 9's transposed path: A^T's chunks hold the wrong k (the permutation off by one place)
    "wide_perm": (Patch("gemm/09_wide.cuh", "const int k = (kb0 + kb) * BK + 8 * i + c;",
                        "const int k = (kb0 + kb) * BK + 8 * i + (c ^ 1);"),),
    # step 9's transposed path: split-K's sum leaves out the last slice
    "wide_drop_slice": (Patch("gemm/09_wide.cuh", "for (int z = 0; z < splits; ++z) {",
                              "for (int z = 0; z < splits - 1; ++z) {"),),
    # the direct convolution leaves the last output channel unwritten
    "skip_channel": (Patch("conv/01_direct.cu", "    plant_slowdown();  // nothing unless a gate test plants it "
                           "(common/plant.cuh)\n",
                           "    plant_slowdown();  // nothing unless a gate test plants it (common/plant.cuh)\n"
                           "    if (k == d.K - 1) return;\n"),),
    # the implicit convolutions never gather the last filter tap (forward: both gathers; backward weights)
    "drop_tap": (
        Patch("conv/implicit_wgmma.cuh",
              "(unsigned)Wi;\n            cp_async_4(",
              "(unsigned)Wi;\n            ok = ok && !(ti == taps / cols - 1 && tj == cols - 1);\n"
              "            cp_async_4("),
        Patch("conv/implicit_wgmma.cuh", "bool ok = (outside & bits) == 0;\n",
              "bool ok = (outside & bits) == 0;\n"
              "            ok = ok && bits != ((1u << (rows - 1)) | (1u << (16 + cols - 1)));\n"),
        Patch("conv/10_implicit_wgmma_backward.cu", "tap_off = c * d.H * d.W + tap_r * d.W + tap_s;\n",
              "tap_off = c * d.H * d.W + tap_r * d.W + tap_s;\n"
              "        live = live && !(tap_r == d.R - 1 && tap_s == d.R - 1);\n")),
    # a cluster pair's rank 1 share of K is never added
    "pair_drop": (PAIR_SUM,),
    # a split data gradient's last slice is never added (and, paired, rank 1's share)
    "drop_slice": (
        Patch("conv/10_implicit_wgmma_backward.cu", "if (st == 1 && kr.count == 0) return;  // an empty slice of a "
              "split K\n",
              "if (st == 1 && kr.count == 0) return;  // an empty slice of a split K\n"
              "        if (st == 1 && gridDim.z > 1 && blockIdx.z == gridDim.z - 1) return;\n"),
        PAIR_SUM),
    # the data gradient's transposed filters lose their last output map
    "transpose": (Patch("conv/10_implicit_wgmma_backward.cu", "Wt2[((size_t)c * d.K + k) * RR + t] = Wt[i];",
                        "Wt2[((size_t)c * d.K + k) * RR + t] = k == d.K - 1 ? 0.0f : Wt[i];"),),
}


def apply(text: str, patch: Patch) -> str:
    found = text.count(patch.old)
    if found != 1:
        raise PatchError(f"{patch.file}: the patch's text occurs {found} times, not once; the shipped kernel "
                         f"changed: update tests/mutants.py\n{patch.old!r}")
    return text.replace(patch.old, patch.new)


def write_tree(dest: Path, defect: str) -> Path:
    """A copy of kernels_cu/ at dest with `defect` applied; returns dest."""
    shutil.copytree(paths.KERNELS, dest)
    for p in DEFECTS[defect]:
        f = dest / p.file
        f.write_text(apply(f.read_text(), p))
    return dest


@contextmanager
def kernel_root(tmp_path: Path, defect: str):
    """The kernel root pointed at a mutated copy while the block runs (in this process: the compiles and the
    sessions of the GPU tests that use it run here, not in sweep workers)."""
    root = write_tree(Path(tmp_path) / f"kernels_cu-{defect}", defect)
    shipped = paths.KERNELS
    paths.KERNELS = root
    try:
        yield root
    finally:
        paths.KERNELS = shipped
