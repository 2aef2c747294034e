"""On the GPU: every ladder step and every shipped parameter set against the float64 reference,
at the edge sizes (1x1x1, odd, not multiples of any tile or of 4), 4096^3 and the config's sizes."""

import numpy as np
import pytest

from nnbench import harness, measure, paths, workloads
from nnbench.measure import TimingSettings
from nnbench.runtime.device import FFMA
from nnbench.runtime.ladder_gemm import SIGNATURE
from nnbench.sweeps import config
from nnbench.workloads.base import Case
from nnbench.workloads.gemm import session as gemm

pytestmark = pytest.mark.gpu

CFG = config.load_gemm(paths.CONFIGS / "gemm.yaml")
SIZES = list(dict.fromkeys([gemm.Shape(1, 1, 1), gemm.Shape(127, 255, 63), gemm.Shape(1000, 777, 1234),
                            gemm.Shape(4096, 4096, 4096), *CFG.sizes]))
QUICK = TimingSettings(budget_s=0.001, min_samples=1, max_noise=1.0)  # verification is what is tested here


@pytest.mark.parametrize("shape", SIZES, ids=lambda s: s.label)
def test_every_step_matches_reference(cuda_backend, shape):
    records = list(harness.run(gemm.WORKLOAD, cuda_backend, CFG.cases, [shape], QUICK, gemm.DEFAULT_RTOL, seed=0))
    bad = [(r["variant"], r["params"], r.get("rel_err"), r.get("error")) for r in records if r["status"] != "PASS"]
    assert not bad, bad
    # every shipped case and both cuBLAS rows (FP32, the baseline; TF32, for context) produced a row
    assert len(records) == len(CFG.cases) + 2
    assert {r["variant"]: r["precision"] for r in records if r["step"] == ""} == {"cublas": "FP32 FFMA",
                                                                                  "cublas-tf32": "TF32"}
    for r in records:  # each row against its own precision's limit at this K, never a looser one
        assert r["rel_err"] < r["rtol"] == measure.error_limit(r["precision"], shape.K)


def test_cublas_is_fp32_not_tf32(cuda_backend):
    """Against the magnitudes, a silent TF32 baseline's error at K = 4096 is about 2^-11 / sqrt(K) per element,
    ~1e-5 at the largest of 262,144; FP32's about 2^-24 times a small factor. A tenth of FP32's limit parts them."""
    rec = next(harness.run(gemm.WORKLOAD, cuda_backend, [], [gemm.Shape(512, 512, 4096)], QUICK, gemm.DEFAULT_RTOL,
                           seed=0))
    assert rec["variant"] == "cublas" and rec["rel_err"] < measure.error_limit(FFMA, 4096) / 10


def test_occupancy_matches_driver(cuda_backend):
    """Our occupancy arithmetic against the driver's own calculator (through CuPy), on real kernels."""
    cupy = pytest.importorskip("cupy")
    from cupy.cuda import driver

    cases = {c.variant.name: c for c in CFG.cases}
    compiled = gemm.WORKLOAD.compile(cuda_backend.arch, list(cases.values()))
    for case, comp in compiled.items():
        threads = case.variant.threads(case.param_dict)
        ours = cuda_backend.occupancy(cuda_backend.load(comp, "gemm"), threads).blocks_per_sm
        mod = cupy.RawModule(path=str(comp.cubin))
        fn = mod.get_function("gemm")
        theirs = driver.occupancyMaxActiveBlocksPerMultiprocessor(fn.kernel.ptr, threads, 0)
        assert ours == theirs, (case.variant.name, ours, theirs)


def test_poisoned_output_catches_unwritten_elements(cuda_backend):
    """The NaN poison must make a kernel that skips elements fail: run naive on a grid too small."""
    prob = gemm.Problem.make(gemm.Shape(70, 50, 30), np.random.default_rng(1))
    bufs = gemm._Buffers(cuda_backend, prob)
    case = next(c for c in CFG.cases if c.variant.name == "naive")
    comp = gemm.WORKLOAD.compile(cuda_backend.arch, [case])[case]
    k = cuda_backend.load(comp, "gemm")
    pa, pb, pc = bufs.ptrs()
    launch = lambda a, b: cuda_backend.bind(  # noqa: E731 - half the grid along m
        k, (1, 7, 1), (32, 8, 1), (np.int32(70), np.int32(50), np.int32(30), np.float32(a), pa, pb, np.float32(b), pc),
        SIGNATURE)
    assert gemm._verify(bufs, launch)[0] == float("inf")


@pytest.mark.parametrize("shape", [gemm.Shape(127, 255, 63), gemm.Shape(1000, 777, 1234), gemm.Shape(512, 512, 4096)],
                         ids=lambda s: s.label)
def test_a_kernel_that_skips_its_last_k_tile_fails_verification(cuda_backend, shape, tmp_path):
    """Step 8 patched to drop its last k-tile (tests/mutants.py, skip_ktiles) is verified by the suite's own
    session and tolerance, and fails; as shipped, it passes."""
    from nnbench.runtime.compile import compile_sources
    from tests import mutants
    v = workloads.get("gemm", "tf32x3")
    params = v.defaults()
    real, = compile_sources(cuda_backend.arch, [(v.source, params)])
    with mutants.kernel_root(tmp_path, "skip_ktiles"):
        mutated, = compile_sources(cuda_backend.arch, [(v.source, params)])
    session = gemm.GemmSession(cuda_backend, QUICK, gemm.DEFAULT_RTOL, seed=0)
    case = Case(v, tuple(params.items()))
    assert session.run_case(case, shape, real)["status"] == "PASS"
    rec = session.run_case(case, shape, mutated)
    assert rec["status"] == "FAIL" and rec["rel_err"] > rec["rtol"], rec.get("rel_err")
