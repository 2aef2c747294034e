"""nvcc, for real: every shipped parameter set of every ladder step compiles for sm_90 (the sm_90a steps for
sm_90a), with no register spills on sm_90, and every kernel at its defaults (and configs/gemm.yaml's sets) for
sm_80; the cache is content-addressed; errors name file and params."""

import pytest

from nnbench import paths, workloads
from nnbench.errors import CompileError
from nnbench.runtime import compile as cc
from nnbench.sweeps import config

CFG = config.load_gemm(paths.CONFIGS / "gemm.yaml")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cubin")


def _param_sets(v, every_choice: bool) -> list[dict]:
    """A variant's defaults, and with every_choice each choice of each parameter with the others at their defaults."""
    if not every_choice:
        return [v.defaults()]
    return [dict(v.defaults(), **{p.name: c}) for p in v.params for c in p.choices
            if not v.problems(dict(v.defaults(), **{p.name: c}))]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_every_shipped_kernel_compiles(arch, cache):
    # An architecture-specific step (sm_90a) is built for its own target under either arch. Every parameter
    # choice is built for sm_90, the GPU the registry's axes are tuned on; sm_80 builds each kernel at its
    # defaults, which keeps the A100's build checked at half the nvcc time on CI's 2 cores.
    every_choice = arch == "sm_90"
    reqs = [cc.CompileRequest.make(paths.KERNELS / c.variant.source, c.param_dict, c.variant.target(arch))
            for c in CFG.cases]
    reqs.append(cc.CompileRequest.make(paths.KERNELS / "common/ceilings.cu", {"CHAINS": 8}, arch))
    reqs.append(cc.CompileRequest.make(paths.KERNELS / "common/verify.cu", {}, arch))
    reqs.append(cc.CompileRequest.make(paths.KERNELS / "common/blocking.cu", {}, arch))
    reqs.append(cc.CompileRequest.make(paths.KERNELS / "conv/08_lenet.cu", {}, arch))  # LeNet-5's elementwise work
    reqs += [cc.CompileRequest.make(paths.ROOT / "tests/kernels/planted.cu", {"MODE": m}, arch) for m in (1, 2)]
    reqs += [cc.CompileRequest.make(paths.KERNELS / v.source, params, v.target(arch))
             for v in workloads.variants_of("train", "cuda") if v.params for params in _param_sets(v, every_choice)]
    reqs += [cc.CompileRequest.make(paths.KERNELS / v.source, {}, arch)
             for v in workloads.variants_of("train", "cuda") + workloads.variants_of("conv", "cuda", ("forward",))
             if not v.params]
    reqs += [cc.CompileRequest.make(paths.KERNELS / v.source, params, v.target(arch))
             for v in workloads.variants_of("conv", "cuda", ("forward", "backward", "pool")) if v.params
             for params in _param_sets(v, every_choice)]
    out = cc.compile_many(reqs, cache=cache, return_errors=True)
    errors = [str(o) for o in out if isinstance(o, CompileError)]
    assert not errors, errors
    for req, comp in zip(reqs, out):
        assert comp.cubin.stat().st_size > 0
        for kernel in ("gemm", "forward_sigmoid", "backward_delta", "weight_gradient"):
            if arch == "sm_90" and kernel in comp.ptxas:
                rep = comp.ptxas[kernel]
                assert rep.registers > 0
                assert rep.spill_store_bytes == 0 and rep.spill_load_bytes == 0, (req.label(), kernel)


def test_every_variant_default_is_shipped():
    shipped = {(c.variant.name, c.params) for c in CFG.cases}
    for v in workloads.variants_of("gemm", "cuda"):
        assert (v.name, tuple(v.defaults().items())) in shipped, f"{v.name} defaults are not in configs/gemm.yaml"


def test_cache_hit_and_key(tmp_path):
    req = cc.CompileRequest.make(paths.KERNELS / "gemm/02_tiled.cu", {"TS": 16}, "sm_90")
    first = cc.compile_cubin(req, tmp_path)
    again = cc.compile_cubin(req, tmp_path)
    assert not first.cached and again.cached and again.cubin == first.cubin
    assert again.ptxas["gemm"].registers == first.ptxas["gemm"].registers
    other = cc.CompileRequest.make(paths.KERNELS / "gemm/02_tiled.cu", {"TS": 8}, "sm_90")
    assert cc.cache_key(other) != cc.cache_key(req)
    assert cc.cache_key(cc.CompileRequest.make(req.source, {"TS": 16}, "sm_80")) != cc.cache_key(req)


def test_cache_key_follows_included_headers(tmp_path, monkeypatch):
    (tmp_path / "h.cuh").write_text("#define X 1\n")
    src = tmp_path / "k.cu"
    src.write_text('#include "h.cuh"\nextern "C" __global__ void gemm() {}\n')
    req = cc.CompileRequest.make(src, {}, "sm_90")
    before = cc.cache_key(req)
    (tmp_path / "h.cuh").write_text("#define X 2\n")
    assert cc.cache_key(req) != before


def test_nvcc_error_names_file_and_params(tmp_path):
    src = tmp_path / "broken.cu"
    src.write_text('extern "C" __global__ void gemm() { int x = TS +; }\n')
    with pytest.raises(CompileError) as e:
        cc.compile_cubin(cc.CompileRequest.make(src, {"TS": 32, "WPT": 8}, "sm_90"), tmp_path / "cache")
    msg = str(e.value)
    assert "broken.cu" in msg and "TS=32 WPT=8" in msg and "sm_90" in msg


def test_parse_ptxas():
    text = """ptxas info    : Compiling entry function 'gemm' for 'sm_90'
ptxas info    : Function properties for gemm
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 128 registers, used 1 barriers, 33280 bytes smem, 400 bytes cmem[0]
"""
    rep = cc.parse_ptxas(text)["gemm"]
    assert (rep.registers, rep.smem_bytes, rep.stack_bytes, rep.spill_store_bytes, rep.spill_load_bytes) == (
        128, 33280, 8, 4, 12)
    assert not rep.wgmma_serialized
    serialized = text.replace("ptxas info    : Used", "ptxas info    : (C7511) Potential Performance Loss: "
                              "wgmma.mma_async instructions are serialized due to insufficient register resources for "
                              "the wgmma pipeline in the function 'gemm'\nptxas info    : Used")
    assert cc.parse_ptxas(serialized)["gemm"].wgmma_serialized  # as ptxas 13.0 words it


def test_a_sweep_compiles_in_parallel_through_nvcc(tmp_path, monkeypatch):
    """A sample of the shipped sweep across every step: compiled by parallel nvcc processes into a
    fresh cache, then found in it. (How fast is a benchmark: nnbench sweep --compile-only.)"""
    from dataclasses import replace

    from nnbench.sweeps import sweep
    monkeypatch.setenv("NNBENCH_CACHE", str(tmp_path))
    spec = config.load_sweep(paths.CONFIGS / "gemm_sweep.yaml")
    sample = replace(spec, cases=spec.cases[::16])
    assert {c.variant.name for c in sample.cases} >= {"tiled", "warptile", "double_buffered", "tf32x3"}
    cold = sweep.compile_only(sample, "sm_90", jobs=2)
    n = len(sample.cases) - cold.skipped
    assert cold.skipped == 2  # BM=256 BN=128 BK=16 double-buffered needs 49,664 B of static smem: over 48 KiB
    assert (cold.kernels, cold.compiled, cold.cached, cold.failed) == (n, n, 0, 0)
    assert cold.jobs == 2 and cold.nvcc_cpu_s > 0 and cold.wall_s > 0
    warm = sweep.compile_only(sample, "sm_90", jobs=2)
    assert (warm.compiled, warm.cached) == (0, n)


def test_step9_builds_for_sm90a_with_hgmma(tmp_path):
    """Step 9 is built with -gencode for sm_90a, and its machine code is Hopper's: HGMMA (wgmma),
    UTMALDG (bulk tensor copies), no spills; with a cluster (CLUSTER_M=2), B's copy is multicast and the
    blocks meet at a cluster barrier, with the persistent tile loop too. With SPLIT_B=1 the module also holds
    `split_b`, and the GEMM (B split already) keeps its wgmma pipeline too. Without cuobjdump only the build is
    checked."""
    from nnbench.profiling import sass
    for name, extra in (("tf32x3_wgmma", {}), ("tf32_wgmma", {}), ("tf32x3_wgmma", {"CLUSTER_M": 2, "PERSISTENT": 1}),
                        ("tf32x3_wgmma", {"SPLIT_B": 1}), ("tf32_wgmma", {"SPLIT_B": 1}),
                        ("tf32x3_wgmma", {"CLUSTER_M": 2, "PERSISTENT": 1, "SPLIT_B": 1})):
        v = workloads.get("gemm", name)
        params = dict(v.defaults(), **extra)
        comp = cc.compile_cubin(cc.CompileRequest.make(paths.KERNELS / v.source, params, v.target("sm_80")), tmp_path)
        assert comp.request.arch == "sm_90a"
        rep = comp.ptxas["gemm"]
        assert rep.spill_store_bytes == 0 and rep.spill_load_bytes == 0 and rep.stack_bytes == 0, name
        assert not rep.wgmma_serialized, (name, extra)  # C7511: the wgmmas would run one at a time
        assert set(comp.ptxas) == ({"gemm", "split_b"} if params["SPLIT_B"] else {"gemm"}), (name, extra)
        split = comp.ptxas.get("split_b")
        assert split is None or split.spill_store_bytes == split.spill_load_bytes == split.stack_bytes == 0
        if sass.cuobjdump():
            fn = sass.parse(sass.dump(comp.cubin))["gemm"]
            lo, hi = fn.hot_loop()
            loop = sass.mix([i for i in fn.instructions if lo <= i.offset <= hi])
            per_slice = 12 if name == "tf32x3_wgmma" else 4  # 3 or 1 products x BK/8 k8 steps (ptxas may unroll)
            assert loop["HGMMA"] > 0 and loop["HGMMA"] % per_slice == 0 and loop["HMMA"] == 0, loop
            assert any(i.base == "UTMALDG" for i in fn.instructions)
            ops = {i.opcode for i in fn.instructions}
            clustered = params["CLUSTER_M"] > 1
            assert ("UTMALDG.2D.MULTICAST" in ops) == clustered and ("UCGABAR_WAIT" in ops) == clustered, ops



def test_step9_transposed_path_builds_with_hgmma_and_no_copy_engine(tmp_path):
    """Step 9's transposed path (WIDE_N defined: 09_wide.cuh is the module's only kernel, `gemm_wide`) at the
    wgmma n Net 8 gives it (n8 for M = 7, n104 with two warpgroups for M = 100), both precisions: sm_90a, no
    spills, no C7511, HGMMA in whole k-blocks in its loop, B by cp.async (LDGSTS), no bulk tensor copy."""
    from nnbench.profiling import sass
    for name, n, g in (("tf32x3_wgmma", 8, 1), ("tf32x3_wgmma", 104, 2), ("tf32_wgmma", 104, 2)):
        v = workloads.get("gemm", name)
        params = dict(v.defaults(), WIDE_N=n, WIDE_G=g)
        comp = cc.compile_cubin(cc.CompileRequest.make(paths.KERNELS / v.source, params, v.target("sm_80")), tmp_path)
        assert set(comp.ptxas) == {"gemm_wide"}, comp.ptxas
        rep = comp.ptxas["gemm_wide"]
        assert rep.spill_store_bytes == 0 and rep.spill_load_bytes == 0 and rep.stack_bytes == 0, (name, n)
        assert not rep.wgmma_serialized, (name, n)
        if sass.cuobjdump():
            fn = sass.parse(sass.dump(comp.cubin))["gemm_wide"]
            lo, hi = fn.hot_loop()
            loop = sass.mix([i for i in fn.instructions if lo <= i.offset <= hi])
            assert loop["HGMMA"] > 0 and loop["HGMMA"] % (12 if name == "tf32x3_wgmma" else 4) == 0, loop
            bases = {i.base for i in fn.instructions}
            assert "LDGSTS" in bases and "UTMALDG" not in bases, bases

def test_arch_flags():
    assert cc.arch_flags("sm_90") == ["-arch=sm_90"]
    assert cc.arch_flags("sm_90a") == ["-gencode=arch=compute_90a,code=sm_90a"]
