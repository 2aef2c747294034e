"""The GEMM session's GPU path on the CPU, with the defenses of nnbench/audit.py: the ladder's kernels and cuBLAS
are stand-ins over host arrays (tests/standins.py) that compute C = alpha A B + beta C in NumPy, launched through
gemm_launch and the cuBLAS launcher's seam as on the device. Each cheat is a planted defect in the stand-in: it is
caught by the defense that names it, and passes with that defense off."""

from __future__ import annotations

import numpy as np
import pytest

from nnbench import audit, measure, workloads
from nnbench.runtime import tensormap
from nnbench.runtime.cpu import CpuBackend
from nnbench.runtime.device import DeviceInfo
from nnbench.workloads.base import Case
from nnbench.workloads.gemm import session as gemm
from tests.standins import HostArrayGpu

H100 = DeviceInfo(name="H100 stand-in", cc=(9, 0), sm_count=132, sm_clock_mhz=1980, mem_clock_mhz=2619,
                  bus_width_bits=5120, mem_bytes=80 << 30, l2_bytes=50 << 20)
SETTINGS = measure.TimingSettings(budget_s=0.01, min_samples=3, energy=False)
SHAPE = gemm.Shape(27, 35, 19)
NAIVE = workloads.get("gemm", "naive")


class GemmGpu(HostArrayGpu):
    """The seam over host arrays with one 'kernel' for every GEMM launch (the ladder's `gemm`, step 9's
    `gemm_wide`, cuBLAS's sgemm): C = alpha A B + beta C, C write-only at beta = 0. `cheat` plants a defect:
    'cached' keeps the first answer for each (alpha, beta) and copies it afterwards, 'by_input' keys that cache on
    the A and B pointers as well, 'by_output' on the C pointer, 'zeros' writes zeros. `launches` records each
    launch's (A, B, C) pointers and the workspace pointers after them, `kernels` each bound kernel."""

    device = H100

    def __init__(self, cheat: str | None = None) -> None:
        super().__init__(ms=2.0)  # few launches a sample: each is a real NumPy product
        self.cheat, self.cache, self.launches, self.kernels = cheat, {}, [], []

    def gemm(self, M, N, K, alpha, pa, pb, beta, pc, extra=()) -> None:
        A, B, C = (self.buffers[p] for p in (pa, pb, pc))
        assert A.shape == (M, K) and B.shape == (K, N) and C.shape == (M, N)
        self.launches.append((pa, pb, pc, *extra))
        key = {"cached": (alpha, beta), "by_input": (pa, pb, alpha, beta), "by_output": (pc, alpha, beta)}.get(
            self.cheat)
        if self.cheat == "zeros":
            C[...] = 0
        elif key is not None and key in self.cache:
            C[...] = self.cache[key]
        else:
            C[...] = alpha * (A.astype(np.float64) @ B) + (beta * C if beta else 0)
            if key is not None:
                self.cache[key] = C.copy()

    def bind(self, kernel, grid, block, args, signature=None, *, smem=0, stream=None):
        M, N, K, alpha, pa, pb, beta, pc, *extra = args
        ptrs = tuple(a for a in extra if isinstance(a, int) and a in self.buffers)  # split-K counters, workspace
        self.kernels.append(kernel)
        return lambda: self.gemm(int(M), int(N), int(K), float(alpha), pa, pb, float(beta), pc, ptrs)


class FakeCublas:
    """cuBLAS's launcher on the stand-in: the same C = alpha A B + beta C through the sgemm seam's pointers."""

    via = "cupy"

    def __init__(self, backend: GemmGpu) -> None:
        self.backend = backend

    def launcher(self, shape, pa, pb, pc, alpha, beta, tf32=False):
        return lambda: self.backend.gemm(shape.M, shape.N, shape.K, alpha, pa, pb, beta, pc)


@pytest.fixture(autouse=True)
def no_device_modules(request, monkeypatch):
    """Step 9's tensor maps and per-tile modules are the driver's and nvcc's: empty here (the stand-in ignores
    them; tests/test_step9_host.py checks what they hold). Not for this file's GPU test, which builds the real
    ones (with them stubbed, its first step-9 row loaded the string "module": seen on an H200)."""
    if request.node.get_closest_marker("gpu"):
        return
    monkeypatch.setattr(tensormap, "encode_tiled", lambda *a: bytes(tensormap.MAP_BYTES))
    monkeypatch.setattr(gemm, "_tile_module", lambda backend, v, params: "module")


def session_for(backend, rtol=None, off=(), monkeypatch=None) -> gemm.GemmSession:
    if monkeypatch is not None:
        monkeypatch.setattr(audit, "ENABLED", set(audit.DEFENSES) - set(off))
    s = gemm.GemmSession(backend, SETTINGS, rtol, seed=0)
    s._cublas = FakeCublas(backend)
    return s


def ladder_row(backend, v, shape=SHAPE, rtol=None, off=(), monkeypatch=None) -> dict:
    return session_for(backend, rtol, off, monkeypatch).run_case(Case(v, tuple(v.defaults().items())), shape,
                                                                  compiled=object())


def caught_by(rec: dict) -> set[str]:
    return {d for d in audit.DEFENSES if f"{d}: " in (rec.get("error") or "")}


LADDER = [v for v in workloads.variants_of("gemm") if v.backend == "cuda"]


@pytest.mark.parametrize("shape", [gemm.Shape(1, 1, 1), gemm.Shape(127, 255, 63), gemm.Shape(100, 2100, 501)],
                         ids=lambda s: s.label)
def test_every_honest_ladder_step_and_both_cublas_rows_pass_every_defense(monkeypatch, shape):
    backend = GemmGpu()
    session = session_for(backend, monkeypatch=monkeypatch)
    for v in LADDER:
        rec = session.run_case(Case(v, tuple(v.defaults().items())), shape, compiled=object())
        assert rec["status"] == "PASS" and not rec.get("error"), (v.name, rec)
    for name in ("cublas", "cublas-tf32"):
        rec = session.run_vendor(name, shape)
        assert rec["status"] == "PASS" and not rec.get("error"), (name, rec)


def test_step9s_transposed_split_k_path_gets_its_own_workspace_on_the_fresh_buffers(monkeypatch):
    """At 100x2100x501 step 9 takes C^T = B^T A^T with split-K: the fresh-buffers launch is a new gemm_launch on
    the new A, B and C, with split-K counters and partial tiles of its own, not the timed launch's, and the
    module the timed launches ran (a kernel's __device__ state is the module's)."""
    backend = GemmGpu()
    step9 = workloads.get("gemm", "tf32x3_wgmma")
    shape = gemm.Shape(100, 2100, 501)
    assert gemm.wide_plan(shape, step9.defaults(), H100.sm_count, H100.smem_per_block_optin).splits > 1
    rec = ladder_row(backend, step9, shape, monkeypatch=monkeypatch)
    assert rec["status"] == "PASS" and "split-K" in rec["params"], rec
    timed = backend.launches[0]
    others = {launch for launch in backend.launches if launch[2] != timed[2]}
    assert len(others) == 1, others  # one launch at other addresses: the fresh buffers'
    (fresh,) = others
    assert len(fresh) == len(timed) == 5 and not set(fresh) & set(timed), (fresh, timed)
    assert len({id(k) for k in backend.kernels}) == 1 and backend.kernels[0].name == "gemm_wide"


@pytest.mark.parametrize("cheat", ["cached", "by_input", "by_output"])
@pytest.mark.parametrize("row", ["ladder", "cublas"])
def test_a_kernel_that_copies_an_answer_it_made_before_is_caught_by_fresh_buffers(monkeypatch, cheat, row):
    """A cache keyed on alpha and beta gives the old AB on the new buffers; one keyed on the pointers works there
    but gives the old AB where -A is written into the A it was timed on. Every other defense passes it."""
    def run(off=()):
        backend = GemmGpu(cheat)
        if row == "ladder":
            return ladder_row(backend, NAIVE, off=off, monkeypatch=monkeypatch)
        return session_for(backend, off=off, monkeypatch=monkeypatch).run_vendor("cublas", SHAPE)
    rec = run()
    assert rec["status"] == "FAIL" and caught_by(rec) == {audit.FRESH_BUFFERS}, rec
    probe = "on fresh buffers" if cheat == "cached" else "written into the A it was timed on"
    assert probe in rec["error"], rec["error"]
    rec = run(off=(audit.FRESH_BUFFERS,))
    assert rec["status"] == "PASS" and not rec.get("error"), rec


def test_a_kernel_that_writes_zeros_under_a_loose_rtol_is_caught_by_zero_output(monkeypatch):
    """At rtol 1 an all-zero C passes the conditioned check (|reference| <= its magnitude); zero-output fails
    the row, and with it off the zeros pass: the other defenses cannot tell them from work."""
    rec = ladder_row(GemmGpu("zeros"), NAIVE, rtol=1.0, monkeypatch=monkeypatch)
    assert rec["status"] == "FAIL" and caught_by(rec) == {audit.ZERO_OUTPUT}, rec
    assert "all-zero C" in rec["error"]
    rec = ladder_row(GemmGpu("zeros"), NAIVE, rtol=1.0, off=(audit.ZERO_OUTPUT,), monkeypatch=monkeypatch)
    assert rec["status"] == "PASS" and not rec.get("error"), rec
    # an honest row at that rtol fails too: the check, not the kernel, is what cannot be trusted
    assert caught_by(ladder_row(GemmGpu(), NAIVE, rtol=1.0, monkeypatch=monkeypatch)) == {audit.ZERO_OUTPUT}


def test_the_zero_error_is_the_largest_reference_over_its_magnitude():
    bufs = gemm._Buffers(CpuBackend(), gemm.Problem.make(gemm.Shape(1, 1, 1), np.random.default_rng(0)))
    assert bufs.zero_error() == 1.0  # one product: |ab| = |a||b|
    bufs = gemm._Buffers(CpuBackend(), gemm.Problem.make(gemm.Shape(64, 64, 256), np.random.default_rng(0)))
    assert 0.05 < bufs.zero_error() < 1.0  # cancellation in each sum, never past the magnitudes


def test_the_numpy_path_runs_every_defense_and_passes(monkeypatch):
    """The CPU backend's row goes through the same _timed: the fresh buffers are host arrays, other objects."""
    probes = []
    honest = gemm._fresh_failure
    monkeypatch.setattr(gemm, "_fresh_failure", lambda *a: probes.append(a) or honest(*a))
    session = gemm.GemmSession(CpuBackend(), SETTINGS, None, seed=0)
    v = workloads.get("gemm", "numpy")
    rec = session.run_case(Case(v, tuple(v.defaults().items())), SHAPE)
    assert rec["status"] == "PASS" and not rec.get("error") and len(probes) == 1, rec


def test_the_fresh_check_leaves_the_timed_a_as_it_was():
    be = CpuBackend()
    bufs = gemm._Buffers(be, gemm.Problem.make(SHAPE, np.random.default_rng(1)))

    def build(ops):
        return lambda a, b: gemm._numpy_launcher(ops, a, b)
    assert gemm._fresh_failure(bufs, build(bufs), build, 1e-5) is None
    assert np.array_equal(bufs.A, bufs.prob.A)


def test_a_fault_in_the_fresh_launch_is_an_error_row(monkeypatch):
    from nnbench.errors import KernelFault

    def fault(*a):
        raise KernelFault("illegal address")
    monkeypatch.setattr(gemm, "_fresh_failure", fault)
    rec = ladder_row(GemmGpu(), NAIVE, monkeypatch=monkeypatch)
    assert rec["status"] == "ERROR" and rec["fault"], rec


# -- on the GPU ---------------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_on_the_gpu_every_ladder_step_and_both_cublas_rows_pass_the_fresh_buffer_and_zero_output_checks(
        cuda_backend, monkeypatch):
    """Every GEMM ladder step and cuBLAS FP32 and TF32 at 1x1x1, 127x255x63 and 100x2100x501 (step 9's transposed
    path with split-K 4, whose counters and workspace the fresh launch gets anew): PASS with every defense on, and
    each row ran both fresh-buffer probes (the spy sees one call a row, each giving None)."""
    from nnbench import harness
    seen = []
    honest = gemm._fresh_failure
    monkeypatch.setattr(gemm, "_fresh_failure", lambda *a: seen.append(honest(*a)) or seen[-1])
    shapes = [gemm.Shape(1, 1, 1), gemm.Shape(127, 255, 63), gemm.Shape(100, 2100, 501)]
    cases = gemm.plan([], {}, cuda_backend.device, "cuda")
    settings = measure.TimingSettings(budget_s=0.01, min_samples=3, max_noise=1.0)
    recs = list(harness.run(gemm.WORKLOAD, cuda_backend, cases, shapes, settings, gemm.DEFAULT_RTOL, seed=0))
    ran = [r for r in recs if r["status"] != "SKIP"]
    bad = [(r["shape"], r["variant"], r["status"], r.get("rel_err"), r.get("error")) for r in ran
           if r["status"] != "PASS"]
    assert not bad, bad
    assert {r["variant"] for r in ran} >= {"cublas", "cublas-tf32", *(c.variant.name for c in cases)} - (
        {"tf32x3_wgmma", "tf32_wgmma"} if workloads.get("gemm", "tf32x3_wgmma").arch_problem(cuda_backend.device)
        else set())
    assert len(seen) == len(ran) and not any(seen), seen
    if not workloads.get("gemm", "tf32x3_wgmma").arch_problem(cuda_backend.device):
        step9 = {r["variant"]: r["params"] for r in ran if r["shape"] == "100×2100×501"}
        assert "split-K 4" in step9["tf32x3_wgmma"] and "split-K 4" in step9["tf32_wgmma"], step9
