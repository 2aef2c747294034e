"""On the GPU: ladder step 9 (both precisions, several tile shapes) against the float64 reference on the
shapes that take its special paths: leading dimensions that are not multiples of 4 (A's phase maps, B's
cp.async), operands too small to map (cp.async), single-launch split-K (partials, a per-tile meeting, a
reduction in slice order; both checks of a case reuse one launch's counters, so a counter left set
hangs or fails the second), idle consumer warpgroups (M <= 64) and narrow tiles (N <= 64); thread-block
clusters sharing B by multicast (odd m-tile counts round up to whole clusters) and the persistent tile loop
(shapes of more tiles than SMs, so blocks take several). Each set again with B split first in global memory
(SPLIT_B=1: `split_b`, then B's copies by the copy engine whatever K, multicast with a cluster). Skips off sm_90."""

import pytest

from nnbench import harness, nets, workloads
from nnbench.measure import TimingSettings
from nnbench.workloads.base import Case
from nnbench.workloads.gemm import session as gemm

pytestmark = pytest.mark.gpu

QUICK = TimingSettings(budget_s=0.001, min_samples=1, max_noise=1.0)
ODD = [(1, 1, 1), (7, 9000, 13), (4097, 129, 1), (257, 511, 1023), (1002, 300, 1024), (127, 255, 63),
       (1000, 777, 1234), (65, 3, 4096), (130, 66, 129)]
MANY = [(2049, 2047, 129), (1536, 1600, 256)]  # 272 and 156 tiles of 128 x 128: a persistent block takes 2 or 3
# The transposed path (M <= 128, N >= 2048; 09_wide.cuh): split-K with a block whose second warpgroup lies past
# N, wgmma n72 with odd M (unaligned pairs of C), n128, and M = K = 1.
WIDE = [(100, 2100, 501), (65, 2049, 129), (128, 2050, 64), (1, 2048, 1)]
NET8 = [(m, n, k) for _, m, n, k in nets.load()["8"].training_gemms(4096)]
SHAPES = [gemm.Shape(*s) for s in dict.fromkeys(ODD + MANY + WIDE + NET8)]


def _cases(params: dict[str, int]) -> list[Case]:
    out = []
    for name in ("tf32x3_wgmma", "tf32_wgmma"):
        v = workloads.get("gemm", name)
        out.append(Case(v, tuple(dict(v.defaults(), **params).items())))
    return out


TILES = [{}, {"BM": 64, "BN": 64, "STAGES": 2}, {"BN": 64}, {"CLUSTER_M": 2}, {"PERSISTENT": 1},
         {"CLUSTER_M": 2, "PERSISTENT": 1, "BN": 64, "STAGES": 3}]
TILE_IDS = ["defaults", "bm64-bn64-s2", "bn64", "cluster2", "persistent", "cluster2-persistent-bn64"]


@pytest.mark.parametrize("params", TILES + [dict(p, SPLIT_B=1) for p in TILES] + [{"SPLIT_K": 4, "SPLIT_B": 1}],
                         ids=TILE_IDS + [f"{i}-split-b" for i in TILE_IDS] + ["split-k4-split-b"])
def test_step9_paths_verify(cuda_backend, params):
    if workloads.get("gemm", "tf32x3_wgmma").arch_problem(cuda_backend.device):
        pytest.skip("step 9 needs sm_90a")
    shapes = SHAPES if params in ({}, {"SPLIT_B": 1}) else SHAPES[:len(ODD) + len(MANY) + len(WIDE)]
    recs = [r for r in harness.run(gemm.WORKLOAD, cuda_backend, _cases(params), shapes, QUICK, gemm.DEFAULT_RTOL,
                                      seed=0)
            if r["variant"] in ("tf32x3_wgmma", "tf32_wgmma")]
    assert len(recs) == 2 * len(shapes)
    bad = [(r["shape"], r["variant"], r["status"], r.get("rel_err"), r.get("error")) for r in recs
           if r["status"] != "PASS"]
    assert not bad, bad
    path = {(r["shape"], r["variant"]): r["params"] for r in recs}
    if params.get("SPLIT_B"):  # every row of the main kernel split B first, and took it by the copy engine
        main = {k: p for k, p in path.items() if "C^T" not in p}
        assert main and all("B split first (split_b)" in p and "cp.async B" not in p for p in main.values()), path
    if params.get("PERSISTENT"):  # 1536 x 1600: 156 tiles (or 325 of 64 columns) on fewer blocks
        assert ", persistent " in path["1536×1600×256", "tf32x3_wgmma"], path
    if not params.get("CLUSTER_M", 1) > 1 and not params.get("PERSISTENT"):  # wide_plan: the transposed path
        assert path["7×9000×13", "tf32x3_wgmma"].endswith("wgmma n8, 1 x 64 columns a block, cp.async B"), path
        assert path["100×2100×501", "tf32_wgmma"].endswith("wgmma n104, 2 x 64 columns a block, cp.async B, "
                                                          "split-K 4"), path
    if params == {"SPLIT_B": 1}:  # K = 501: no cp.async B, and the 128-column tile the cp.async rule narrowed
        assert path["500×4096×501", "tf32x3_wgmma"].endswith("TMA, B split first (split_b)"), path
    if not params:
        assert path["100×4096×501", "tf32x3_wgmma"].endswith("split-K 4")
        assert path["4097×129×1", "tf32x3_wgmma"].endswith("BN=64 here (B by cp.async, few tiles), cp.async A+B")
        assert "BN=64 here (N <= 64)" in path["101×7×4096", "tf32x3_wgmma"]
        assert "BM=64 BN=64 here (M <= 64, N <= 64), cp.async A+B" in path["1×1×1", "tf32x3_wgmma"]
        assert path["121×500×4096", "tf32x3_wgmma"].endswith("A by 4 phase maps (leading dim % 4 != 0), split-K 32")
        assert path["500×4096×501", "tf32x3_wgmma"].endswith("TMA, cp.async B")


@pytest.mark.parametrize("defect,shape", [("wide_perm", gemm.Shape(7, 4096, 101)),
                                          ("wide_drop_slice", gemm.Shape(100, 4096, 501))],
                         ids=["permutation", "split-k-slice"])
def test_the_transposed_path_with_a_planted_defect_fails_verification(cuda_backend, defect, shape, tmp_path):
    """The transposed path patched with a test-only defect (tests/mutants.py on 09_wide.cuh: A^T's chunks hold
    the wrong k; the split-K sum drops the last slice) fails the suite's verification; as shipped, it passes.
    The session builds the transposed kernel itself, from the kernel root the mutant points at."""
    from nnbench.runtime.compile import compile_sources
    from tests import mutants
    v = workloads.get("gemm", "tf32x3_wgmma")
    if v.arch_problem(cuda_backend.device):
        pytest.skip("step 9 needs sm_90a")
    params = v.defaults()
    real, = compile_sources(v.target(cuda_backend.arch), [(v.source, params)])
    session = gemm.GemmSession(cuda_backend, QUICK, gemm.DEFAULT_RTOL, seed=0)
    ok = session.run_case(Case(v, tuple(params.items())), shape, real)
    assert ok["status"] == "PASS" and "C^T = B^T A^T" in ok["params"], (ok.get("rel_err"), ok["params"])
    with mutants.kernel_root(tmp_path, defect):
        mutated, = compile_sources(v.target(cuda_backend.arch), [(v.source, params)])
        bad = gemm.GemmSession(cuda_backend, QUICK, gemm.DEFAULT_RTOL, seed=0).run_case(
            Case(v, tuple(params.items())), shape, mutated)
    assert "C^T = B^T A^T" in bad["params"] and bad["status"] == "FAIL" and bad["rel_err"] > bad["rtol"], \
        (bad.get("rel_err"), bad["params"])
