"""What a sweep pays per case outside its kernels, on the host (issue 30's overhead target): reads that
cost milliseconds on the H100 happen once per process, not once per `measure` call."""

from nnbench.runtime import nvml


class _FakeNvml:
    """pynvml's surface that `Nvml` and `Telemetry` touch, counting the maximum-clock reads."""

    NVMLError = RuntimeError

    def __init__(self) -> None:
        self.max_reads = 0

    def nvmlDeviceGetHandleByPciBusId(self, bus):
        return "handle"

    def nvmlDeviceGetMaxClockInfo(self, handle, which):
        self.max_reads += 1  # 1.7 ms a read on the H100 (docs/data/search/step4_h100/run3/case_profile.txt)
        return 1980


def test_the_maximum_clock_is_read_once_per_gpu_not_per_measure_call(monkeypatch):
    fake = _FakeNvml()
    monkeypatch.setattr(nvml, "pynvml", fake)
    monkeypatch.setattr(nvml, "_init", lambda: True)
    gpu = nvml.Nvml("00000000:19:00.0")
    telemetries = [gpu.telemetry() for _ in range(5)]  # one per measure call, i.e. per case
    assert all(t.max_sm_mhz == 1980.0 for t in telemetries)
    assert fake.max_reads == 1
