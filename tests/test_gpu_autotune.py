"""On the GPU: the autotuner on a real ResNet layer (forward and backward) and GEMM step 9 shapes, each
chosen tile verified against float64, and the cache round trip: a second run takes the same tiles from
the cache without timing (docs/autotune.md)."""

import json
import re

import pytest

from nnbench import harness, measure, workloads
from nnbench.runtime.autotune import CACHED, EventTimer, Identity, Tuner
from nnbench.workloads.base import Case
from nnbench.workloads.conv import problem as conv_problem
from nnbench.workloads.conv import session as conv
from nnbench.workloads.gemm import session as gemm

pytestmark = pytest.mark.gpu

FAST = measure.TimingSettings(budget_s=0.02, min_samples=3, max_noise=1.0)


def ran(rec: dict) -> str:
    """What a row launched: its params without how the tile was chosen."""
    return re.sub(r" · tuned \(\w+\)", "", rec["params"])


def tuner(backend, path) -> Tuner:
    return Tuner(Identity.of(backend), EventTimer(backend), path=path)


def two_runs(workload, backend, cases, problems, rtol, path):
    """Each case's rows from a run that tunes into an empty cache, then from one that reads it."""
    runs = []
    for _ in range(2):
        t = tuner(backend, path)
        recs = [r for r in harness.run(workload, backend, cases, problems, FAST, rtol, seed=0, vendor=False, tuner=t)]
        runs.append((recs, t.timings))
    return runs


def test_conv_layers_are_tuned_then_taken_from_the_cache(cuda_backend, tmp_path):
    layers = conv_problem.load_sets()["resnet"][:2]
    cases = [Case.defaults(v) for v in workloads.variants_of("conv") if v.name == "implicit-wgmma"]
    cases += [Case.defaults(v) for v in workloads.variants_of("conv", kinds=("backward",)) if v.runner == "implicit"]
    (first, timed), (second, untimed) = two_runs(conv.WORKLOAD, cuda_backend, cases, layers, conv_problem.DEFAULT_RTOL,
                                                 tmp_path / "autotune.json")
    assert timed > 0 and untimed == 0
    for a, b in zip(first, second):
        assert a["status"] == b["status"] == "PASS", (a["variant"], a["shape"], a.get("error"), a.get("rel_err"))
        assert a["tuned"] and not a["tuned"].startswith(CACHED) and b["tuned"].startswith(CACHED)
        assert ran(a) == ran(b)  # the same tile and the same split (the host's text after " · ")
        assert "tuned (cache)" in b["params"]
    entries = json.loads((tmp_path / "autotune.json").read_text())["entries"]
    assert len(entries) == len(cases) * len(layers)


@pytest.mark.parametrize("shape", [gemm.Shape(4096, 4096, 4096), gemm.Shape(1000, 777, 1234),
                                   gemm.Shape(100, 4096, 501), gemm.Shape(7, 4096, 101)])
def test_gemm_step9_is_tuned_then_taken_from_the_cache(cuda_backend, tmp_path, shape):
    cases = gemm.plan(["tf32x3_wgmma"], {}, cuda_backend.device)
    (first, timed), (second, untimed) = two_runs(gemm.WORKLOAD, cuda_backend, cases, [shape], None,
                                                 tmp_path / "autotune.json")
    assert timed > 0 and untimed == 0
    (a,), (b,) = first, second
    assert a["status"] == b["status"] == "PASS", (a.get("error"), a.get("rel_err"), a.get("rtol"))
    assert ran(a) == ran(b) and b["tuned"].startswith(CACHED)


def test_no_tuner_keeps_the_fixed_tiles(cuda_backend, tmp_path):
    cases = gemm.plan(["tf32x3_wgmma"], {}, cuda_backend.device)
    (rec,) = harness.run(gemm.WORKLOAD, cuda_backend, cases, [gemm.Shape(1024, 1024, 1024)], FAST, None, seed=0,
                         vendor=False)
    assert rec["status"] == "PASS" and not rec.get("tuned") and rec["params"].startswith(cases[0].param_label)
