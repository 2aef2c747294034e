"""The vendor baselines' host-side logic, without a GPU: which cuDNN autotune draw a row keeps, what
it records of the algorithm, and how many epochs a PyTorch row trains."""

from types import SimpleNamespace

import pytest

from nnbench import measure
from nnbench.runtime import vendor
from nnbench.runtime.vendor import CudnnDraw, short_kernel_names
from nnbench.workloads.conv import launch as conv_launch
from nnbench.workloads.conv import session as conv
from nnbench.workloads.train import mlp


def test_kernel_names_lose_void_templates_and_arguments_and_keep_order_and_counts():
    names = ["void cudnn::cnn::conv2d_grouped_direct_kernel<false, true, float>(cudnn::cnn::Params<(int)2>, float*)",
             "sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nchwkcrs_nchw_tilesize128x128x32_cudnn",
             "void nchwToNhwcKernel<float, float, float, true>(int, int, float const*, float*)",
             "Memcpy DtoD (Device -> Device)",
             "void nchwToNhwcKernel<float, float, float, true>(int, int, float const*, float*)"]
    assert short_kernel_names(names) == ("cudnn::cnn::conv2d_grouped_direct_kernel + "
                                         "sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nchwkcrs_nchw_tilesize128x128x32"
                                         "_cudnn + nchwToNhwcKernel x2")
    assert short_kernel_names([]) == ""


class _Stats:
    def __init__(self, ms):
        self.median_ms = ms

    def as_record(self):
        return {"median_ms": self.median_ms}


def _draw(label, ms, calls, kernels):
    return CudnnDraw(launch=lambda: calls.append(("launch", label)), result=lambda: calls.append(("result", label)),
                     kernels=lambda: kernels, label=label), ms


@pytest.mark.parametrize("fast", [0, 1])
def test_a_cudnn_row_keeps_its_fastest_draw_verifies_it_and_names_every_draws_kernels(monkeypatch, fast):
    calls = []
    made = [_draw("deterministic off", 0.100 if fast else 0.091, calls, "sm90_xmma_a"),
            _draw("deterministic on", 0.091 if fast else 0.100, calls, "sm90_xmma_b")]
    times = {id(d.launch): ms for d, ms in made}
    monkeypatch.setattr(measure, "measure", lambda backend, launch, settings: _Stats(times[id(launch)]))
    session = SimpleNamespace(backend=None, settings=None)
    rec = conv.ConvSession._cudnn_row(session, {"rtol": 1e-5, "params": "p"}, [d for d, _ in made],
                                      poison=lambda: calls.append(("poison", "")), check=lambda: (2e-6, 1e-5))
    kept = made[fast][0].label
    assert rec["median_ms"] == 0.091 and rec["status"] == "PASS" and rec["params"] == "p"
    # The kept draw's outputs are poisoned, made again and copied out before they are verified.
    assert calls == [("poison", ""), ("launch", kept), ("result", kept)]
    assert rec["tiles"].startswith(f"kept {kept} · ")
    assert "deterministic off 0.1000 ms" in rec["tiles"] or "deterministic off 0.0910 ms" in rec["tiles"]
    assert "sm90_xmma_a" in rec["tiles"] and "sm90_xmma_b" in rec["tiles"]
    failed = conv.ConvSession._cudnn_row(session, {"rtol": 1e-5, "params": "p"}, [d for d, _ in made],
                                         poison=lambda: None, check=lambda: (1e-4, 1e-5))
    assert failed["status"] == "FAIL"


def test_two_autotune_draws_differ_only_in_the_flag_that_keys_torchs_cache():
    assert vendor.AUTOTUNE_DRAWS == (False, True)
    assert "fastest of 2 draws" in conv_launch.AUTOTUNED


def test_a_pytorch_row_timed_by_measure_trains_as_many_epochs_as_ours():
    """At batch 64 over 16,384 samples (256 steps an epoch) a 1-epoch run trained the PyTorch rows
    for 2 epochs, 512 steps, beside our 256: the per-sample rows' warm-up epoch, which a row timed by
    `measure` does not need."""
    assert mlp.torch_epochs(256, 256, warm_up_epoch=False) == 1
    assert mlp.torch_epochs(3 * 256, 256, warm_up_epoch=False) == 3
    assert mlp.torch_epochs(257, 256, warm_up_epoch=False) == 2  # whole epochs, at least the steps asked for
    assert mlp.torch_epochs(256, 256, warm_up_epoch=True) == 2  # the per-sample rows' first epoch is no sample
    assert mlp.torch_epochs(10 * 256, 256, warm_up_epoch=True) == 10


def test_the_profiler_stops_with_cupti_teardown_asked_and_the_environment_is_restored(monkeypatch):
    """Left subscribed, CUPTI made every later launch 1.4-2.5x slower to issue (H100): TEARDOWN_CUPTI
    must be 1 when PyTorch's profiler stops (it reads it then), and as before afterwards."""
    import os
    import sys
    import types
    seen = {}

    class Profile:
        def __init__(self, activities):
            self.activities = activities

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            seen["at_stop"] = os.environ.get("TEARDOWN_CUPTI")

        def events(self):
            return [SimpleNamespace(name="cudaLaunchKernel", device_type="DeviceType.CPU"),
                    SimpleNamespace(name="void k<float>(float*)", device_type="DeviceType.CUDA")]

    profiler = types.ModuleType("torch.profiler")
    profiler.ProfilerActivity, profiler.profile = SimpleNamespace(CUDA="cuda"), Profile
    fake = types.ModuleType("torch")
    fake.profiler, fake.cuda = profiler, SimpleNamespace(synchronize=lambda: None)
    monkeypatch.setitem(sys.modules, "torch", fake)
    monkeypatch.setitem(sys.modules, "torch.profiler", profiler)
    monkeypatch.delenv("TEARDOWN_CUPTI", raising=False)
    assert vendor.kernel_names(fake, lambda: None) == "k"
    assert seen["at_stop"] == "1" and "TEARDOWN_CUPTI" not in os.environ
    monkeypatch.setenv("TEARDOWN_CUPTI", "0")
    vendor.kernel_names(fake, lambda: None)
    assert seen["at_stop"] == "1" and os.environ["TEARDOWN_CUPTI"] == "0"


def test_a_soak_names_no_cudnn_kernels_and_starts_no_profiler(monkeypatch):
    """In a soak (measure.VERDICTS_ONLY) a cuDNN draw's kernels are not named: naming them runs one call under
    PyTorch's profiler, CUPTI set up and torn down, for a note nobody reads there; outside a soak they are."""
    from nnbench import measure
    from nnbench.runtime import vendor
    calls = []

    class FakeCuda:
        @staticmethod
        def synchronize():
            calls.append("synchronize")

    fake_torch = type("FakeTorch", (), {"cuda": FakeCuda})
    monkeypatch.setattr(measure, "VERDICTS_ONLY", [True])
    assert vendor.kernel_names(fake_torch, lambda: calls.append("launch")) == \
        "kernels not named (a soak checks verdicts only)"
    assert calls == []
    monkeypatch.setattr(measure, "VERDICTS_ONLY", [False])
    got = vendor.kernel_names(fake_torch, lambda: calls.append("launch"))
    # outside a soak the profiler's path runs: here it stops at the missing torch or at the fake's profiler
    assert got.startswith("kernels unknown") or calls, got
