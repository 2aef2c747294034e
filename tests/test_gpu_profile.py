"""On the GPU: `nnbench profile` end to end on a GEMM step (the achieved figures and the roofline),
and with --ncu where Nsight Compute is installed."""

import shutil

import pytest
from click.testing import CliRunner

from nnbench.cli import cli
from nnbench.profiling import profile as profile_suite
from nnbench.profiling import sass
from nnbench.runtime import open_backend
from nnbench.suites import gemm as gemm_suite

pytestmark = pytest.mark.gpu


def test_profile_a_gemm_step(cuda_backend):
    prof = profile_suite.profile(cuda_backend, "gemm", "coarsened", {"TS": 32, "WPT": 8},
                                 gemm_suite.Shape(1024, 1024, 1024), None)
    assert prof.record["status"] == "PASS" and prof.record["median_ms"] > 0
    assert prof.roof.flops > 10e12 and prof.roof.bandwidth > 500e9  # measured, not theoretical
    assert prof.where.bound == "compute" and 0 < prof.where.pct_of_roof < 100
    k = prof.kernels[0]
    assert k.kernel == "gemm" and k.registers > 0 and 0 < k.occupancy <= 1
    if sass.cuobjdump():
        assert k.mix["FFMA"] == 256 and k.loop is not None


@pytest.mark.skipif(shutil.which("ncu") is None, reason="Nsight Compute (ncu) is not installed")
def test_profile_with_ncu():
    open_backend("cuda")
    res = CliRunner().invoke(cli, ["profile", "gemm", "-v", "tiled", "--ts", "32", "--m", "2048", "--n", "2048",
                                   "--k", "2048", "--ncu"])
    assert res.exit_code == 0, res.output
    assert "Nsight Compute" in res.output and "nnbench median vs ncu duration" in res.output


@pytest.mark.parametrize("version,batch", [("fused", 1), ("kcm-mass", 1), ("batched", 256)])
def test_profile_an_mlp_version(cuda_backend, version, batch):
    from nnbench.suites import train
    problem = train.problem_for("1", batch=batch, max_iterations=1040, epochs=1, train_samples=20 * batch)
    prof = profile_suite.profile(cuda_backend, "mlp", version, {}, problem, None)
    assert prof.record["status"] == "PASS" and prof.seconds > 0
    assert prof.where is not None and prof.where.pct_of_roof > 0
    assert profile_suite.main_kernel(prof.variant) in [k.kernel for k in prof.kernels]


@pytest.mark.skipif(shutil.which("ncu") is None, reason="Nsight Compute (ncu) is not installed")
def test_profile_an_mlp_version_with_ncu():
    open_backend("cuda")
    res = CliRunner().invoke(cli, ["profile", "mlp", "-v", "fused", "--net", "1", "--ncu"])
    assert res.exit_code == 0, res.output
    assert "Nsight Compute" in res.output and "achieved occupancy" in res.output


@pytest.mark.parametrize("variant", ["tiled", "unroll", "unroll-backward"])
def test_profile_a_conv_path(cuda_backend, variant):
    from nnbench.suites import conv
    prof = profile_suite.profile(cuda_backend, "conv", variant, {}, conv.ConvShape(8, 16, 28, 28, 32, 3, 1, 1), None)
    assert prof.record["status"] == "PASS" and prof.seconds > 0 and prof.where is not None
