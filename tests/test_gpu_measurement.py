"""On the GPU: NVML's readings reach every record (clocks, throttle reasons, power and energy), the raw
samples reach the JSON file and validate against the schema, and `devices` shows power and clocks."""

import json

import pytest
from click.testing import CliRunner

from nnbench import rawresults
from nnbench.cli import cli

pytestmark = pytest.mark.gpu


def test_gemm_records_carry_nvml_and_samples(cuda_backend, tmp_path):
    out = tmp_path / "g.jsonl"
    res = CliRunner().invoke(cli, ["gemm", "-v", "double_buffered", "--size", "1024", "--budget", "0.2", "--seed", "0",
                                   "--csv", str(tmp_path / "g.csv"), "--json", str(out)])
    assert res.exit_code == 0, res.output
    recs = rawresults.load(out)
    assert {r.fields["variant"] for r in recs} >= {"double_buffered", "cublas"}
    for r in recs:
        assert r.samples_ms is not None and r.samples_ms.size == r.fields["samples"]
        assert r.fields["sm_clock_mhz"] and r.fields["mem_clock_mhz"] and r.fields["throttle"] is not None
        assert r.fields["energy_method"] in ("instant power", "average power")  # windows under 1 s
        assert 20 < r.fields["power_w"] < 1500
        assert r.fields["energy_j"] is None and r.fields["energy_note"] == "not measured: --energy is off"
    jsonschema = pytest.importorskip("jsonschema")
    for line in out.read_text().splitlines():
        jsonschema.validate(json.loads(line), rawresults.schema())


def test_energy_counter_over_a_long_window(cuda_backend):
    from nnbench import measure
    from nnbench.harness import run
    from nnbench.workloads.gemm import session as gemm_suite
    cases = gemm_suite.plan(["double_buffered"], {}, cuda_backend.device, "cuda")
    settings = measure.TimingSettings(budget_s=0.2, energy=True)  # the energy window after the samples: >= 1 s
    rec = list(run(gemm_suite.WORKLOAD, cuda_backend, cases, [gemm_suite.Shape(2048, 2048, 2048)], settings, 5e-5,
                   seed=1, vendor=False))[-1]
    assert rec["status"] == "PASS" and rec["energy_method"] == "counter" and rec["energy_window_ms"] >= 1000
    assert 50 < rec["power_w"] < 1500 and rec["gflops_per_j"] > 0 and rec["energy_window_j"] > rec["energy_j"] > 0


def test_devices_shows_power_and_clocks():
    res = CliRunner().invoke(cli, ["devices"])
    if "CPU backend" in res.output:  # no GPU: devices lists the CPU
        pytest.skip("no GPU")
    assert res.exit_code == 0, res.output
    assert "power limit" in res.output and " W" in res.output and ("free" in res.output or "locked" in res.output)


def test_per_sample_trainers_record_nvml(tmp_path):
    """Every per-sample GPU row (a kernel-per-layer version, the persistent `fused` kernel and PyTorch's
    eager and graph rows) carries the clocks, the throttle reasons and the energy over its timed runs (`measure`
    for our versions, measure.RunWatch for PyTorch's epochs); the NumPy row, on the host, carries none."""
    out = tmp_path / "t.jsonl"
    res = CliRunner().invoke(cli, ["train", "--net", "1", "-v", "fused", "-v", "simple", "-v", "sequential",
                                   "--max-iterations", "3120", "--compare", "torch", "--torch-iterations", "520",
                                   "--no-letters", "--csv", str(tmp_path / "t.csv"), "--json", str(out)])
    assert res.exit_code == 0, res.output
    recs = {r.fields["variant"]: r.fields for r in rawresults.load(out)}
    assert set(recs) >= {"fused", "simple", "sequential", "torch-eager", "torch-graph"}, set(recs)
    for name, r in recs.items():
        if name == "sequential":
            assert r["sm_clock_mhz"] is None and r["energy_method"] is None
            continue
        assert r["status"] == "PASS", (name, r)
        assert r["sm_clock_mhz"] and r["mem_clock_mhz"] and r["throttle"] is not None, name
        assert r["energy_method"] in ("counter", "instant power", "average power"), name
        assert 20 < r["power_w"] < 1500 and r["energy_j"] is None and r["items_per_j"] is None, name
        assert r["energy_note"] == "not measured: --energy is off", name
        assert r["timing"] == "host-issued" and r["samples"] >= 1, name
