"""The GEMM suite on the NumPy backend: reference, verification, records and their schema."""

import numpy as np

from nnbench import harness, measure, paths, results, workloads
from nnbench.runtime.cpu import CpuBackend
from nnbench.workloads.gemm import session as gemm

QUICK = measure.TimingSettings(budget_s=0.001, min_samples=3, max_noise=1.0)


def test_inputs_are_fresh_nonzero_and_column_major():
    rng = np.random.default_rng()
    p = gemm.Problem.make(gemm.Shape(7, 5, 3), rng)
    assert p.A.flags.f_contiguous and p.A.dtype == np.float32 and p.A.shape == (7, 3)
    assert np.all(np.abs(p.A) >= 0.1) and np.all(np.abs(p.B) >= 0.1)
    q = gemm.Problem.make(gemm.Shape(7, 5, 3), rng)
    assert not np.array_equal(p.A, q.A)


def test_reference_is_blas_semantics():
    p = gemm.Problem.make(gemm.Shape(4, 3, 2), np.random.default_rng(0))
    A, B, C = (x.astype(np.float64) for x in (p.A, p.B, p.C0))
    np.testing.assert_allclose(p.reference(0.75, -1.5), 0.75 * A @ B - 1.5 * C)
    np.testing.assert_allclose(p.reference(1.0, 0.0), A @ B)


def test_verify_catches_wrong_and_unwritten_results():
    be = CpuBackend()
    prob = gemm.Problem.make(gemm.Shape(9, 11, 13), np.random.default_rng(3))
    bufs = gemm._Buffers(be, prob)
    assert gemm._verify(bufs, lambda a, b: gemm._numpy_launcher(bufs, a, b))[0] < 1e-6
    # forgets the last column: stays NaN in the beta = 0 check
    def partial(a, b):
        return lambda: bufs.C.__setitem__((slice(None), slice(0, -1)), (a * (bufs.A @ bufs.B))[:, :-1])
    assert gemm._verify(bufs, partial)[0] == float("inf")
    # ignores beta
    assert gemm._verify(bufs, lambda a, b: gemm._numpy_launcher(bufs, a, 0.0))[0] > 1e-2


def test_run_yields_schema_records():
    be = CpuBackend()
    cases = gemm.plan([], {}, None, "cpu")
    recs = list(harness.run(gemm.WORKLOAD, be, cases, [gemm.Shape(31, 17, 9)], QUICK, gemm.DEFAULT_RTOL,
                            env=results.environment(be)))
    assert len(recs) == 1
    r = recs[0]
    assert r["status"] == "PASS" and r["variant"] == "numpy" and r["flops"] == 2 * 31 * 17 * 9
    assert r["gflops"] == r["flops"] / (r["median_ms"] * 1e-3) / 1e9
    assert set(r) <= set(results.FIELDS)
    assert r["problem"] == "M=31 N=17 K=9" and r["unit"] == "launch" and r["precision"] == "FP32 host"


def test_every_registered_variant_is_consistent():
    for v in workloads.variants_of("gemm"):
        p = v.defaults()
        assert not v.problems(p), (v.name, v.problems(p))
        if v.source:
            assert (paths.KERNELS / v.source).exists()
            assert 0 < v.threads(p) <= 1024
            assert v.smem_bytes(p) <= 48 * 1024
            tile_m, tile_n = block_tile(v, p)
            for M, N in ((1000, 777), (1, 1), (tile_m, tile_n), (tile_m + 1, 2 * tile_n - 1)):
                grid = v.launch_grid(p, {"M": M, "N": N, "K": 1})
                # covers every element of C, and no block lies wholly outside it
                assert grid[0] * tile_m >= M > (grid[0] - 1) * tile_m, (v.name, M, grid)
                assert grid[1] * tile_n >= N > (grid[1] - 1) * tile_n, (v.name, N, grid)


def block_tile(v, p: dict) -> tuple[int, int]:
    """The C tile (rows, columns) one block of each step writes, read from the kernels' sources
    (blockIdx.x * tile + ..., blockIdx.y * tile + ...), independently of the registry's grid."""
    if v.name == "naive":
        return 32, 8  # one thread per element, block (32, 8)
    if v.name in ("tiled", "coarsened"):
        return p["TS"], p["TS"]
    if v.name in ("register_2d", "vectorized"):
        return p["TSM"], p["TSN"]
    return p["BM"], p["BN"]


def test_flop_and_byte_counts():
    s = gemm.Shape(4096, 4096, 4096)
    assert s.flops == 2 * 4096**3
    assert s.bytes == 4 * 3 * 4096**2
