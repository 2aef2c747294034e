"""A new workload touches 4 places, all its own (docs/ARCHITECTURE.md, "Adding a workload"): its kernels, its
package, one line in the workload list, a config. This test makes a toy workload so, in a temporary folder, and
runs `sweep`, `check`, `profile` and `report` on it with no other change to nnbench.

The line in the list is the NNBENCH_WORKLOADS variable here (the sweep's workers are processes of their own, and
a variable reaches them where an edit of this process's dictionary would not); in nnbench's tree it is one line
in nnbench/workloads/__init__.py's WORKLOADS.
"""

from __future__ import annotations

import textwrap

import pandas as pd
import pytest
from click.testing import CliRunner

from nnbench.cli import cli

KERNEL = """\
// Toy step 1: y = a * x, one thread per element.
#ifndef BLOCK
#define BLOCK 128
#endif
extern "C" __global__ void __launch_bounds__(BLOCK) scale(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
"""

VARIANTS = """\
from nnbench.registry import Variant, param
from nnbench.runtime.device import FFMA, HOST

KERNELS = {kernels!r}
VARIANTS = (
    Variant("toy", "numpy", 0, "NumPy: the CPU path", None, backend="cpu", runner="numpy", precision=HOST),
    Variant("toy", "scale", 1, "one thread per element", KERNELS + "/toy/01_scale.cu",
            params=(param("BLOCK", 128, (64, 128, 256), "threads per block"),), block="(BLOCK,)",
            grid="(cdiv(N, BLOCK),)", kernel="scale", precision=FFMA),
)
"""

SESSION = """\
from dataclasses import dataclass

import numpy as np

from nnbench import measure
from nnbench.workloads.base import Session, Workload, problem_text
from nnbench.yamlnodes import integer, sequence

from toywl.variants import VARIANTS


@dataclass(frozen=True)
class Vector:
    N: int

    def as_dict(self):
        return {"N": self.N}

    @property
    def label(self):
        return f"N={self.N}"

    @property
    def flops(self):
        return float(self.N)

    @property
    def bytes(self):
        return 8.0 * self.N


class ToySession(Session):
    def __init__(self, backend, settings, rtol, seed, env):
        self.backend, self.settings, self.rtol, self.seed, self.env = backend, settings, rtol, seed, env

    def base_record(self, p):
        return dict(workload="toy", shape=p.label, problem=problem_text(p), flops=p.flops, bytes=p.bytes,
                    rtol=self.rtol, seed=self.seed, unit="launch", **self.env)

    def prepare(self, p, following=None):
        rng = np.random.default_rng([self.seed, p.N])
        self.x = rng.uniform(0.5, 1.0, p.N).astype(np.float32)
        self.ref = 3.0 * self.x.astype(np.float64)  # the float64 reference

    def run_case(self, case, p, compiled):
        rec = dict(self.base_record(p), variant=case.variant.name, step=case.variant.step,
                   params=case.param_label, precision=case.variant.precision)
        y = np.full(p.N, np.nan, np.float32)  # poisoned first
        launch = lambda: np.multiply(self.x, np.float32(3.0), out=y)  # noqa: E731
        launch()
        err = measure.conditioned_error(y, self.ref, np.abs(self.ref))
        stats = measure.measure(self.backend, launch, self.settings)
        rec.update(stats.as_record(), rel_err=err, status="PASS" if err <= self.rtol else "FAIL")
        return rec


class ToyWorkload(Workload):
    name = "toy"
    table = VARIANTS
    default_rtol = 1e-6
    baseline = "numpy"

    def runs_on(self, v, backend):
        return v.backend == backend or v.backend == "cpu"

    def parse_problems(self, path, node):
        return [Vector(integer(path, n, "shapes")) for n in sequence(path, node, "shapes")]

    def session(self, backend, settings, rtol, seed, env, options=None):
        return ToySession(backend, settings, rtol if rtol is not None else self.default_rtol, seed, env)


WORKLOAD = ToyWorkload()
"""

CONFIG = """\
name: toy
suite: toy
shapes:
  - [1000, 4097]
timing: {budget: 0.02, min_samples: 5}
variants:
  numpy:
  scale:
    axes: {BLOCK: [64, 128]}
"""


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """The 4 places: kernels/toy/01_scale.cu, the package toywl/, NNBENCH_WORKLOADS, toy.yaml."""
    kernels = tmp_path / "kernels"
    (kernels / "toy").mkdir(parents=True)
    (kernels / "toy" / "01_scale.cu").write_text(KERNEL)
    pkg = tmp_path / "toywl"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "variants.py").write_text(VARIANTS.format(kernels=str(kernels)))
    (pkg / "session.py").write_text(textwrap.dedent(SESSION))
    (tmp_path / "toy.yaml").write_text(CONFIG)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{__import__('os').environ.get('PYTHONPATH', '')}")
    monkeypatch.setenv("NNBENCH_WORKLOADS", "toy=toywl")
    from nnbench import workloads
    monkeypatch.setitem(workloads.WORKLOADS, "toy", "toywl")  # as this process read the variable at import
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(*args):
    res = CliRunner().invoke(cli, [str(a) for a in args])
    assert res.exit_code == 0, res.output + repr(res.exception)
    return res.output


def test_a_toy_workload_in_four_places_sweeps_checks_profiles_and_reports(toy):
    run("sweep", "toy.yaml", "--backend", "cpu", "--out", "r1.csv")
    run("sweep", "toy.yaml", "--backend", "cpu", "--out", "r2.csv")
    rows = pd.read_csv("r1.csv")
    ran = rows[rows["status"] == "PASS"]
    assert set(ran["workload"]) == {"toy"} and set(ran["variant"]) == {"numpy"} and len(ran) == 2  # two shapes
    assert set(rows.loc[rows["variant"] == "scale", "status"]) == {"SKIP"}  # a GPU variant on the CPU backend
    out = run("check", "r1.csv", "r2.csv", "--tolerance", "100%", "--allow-unstable")
    assert "toy" in out
    prof = run("profile", "toy", "-v", "scale", "--config", "toy.yaml", "--backend", "cpu",
               "--arch", "sm_90")
    assert "scale BLOCK=64 · resources on sm_90" in prof  # ptxas ran on its kernel: the first BLOCK of its axis
    run("report", "r1.csv", "--html", "r.html")
    assert "N=4097" in (toy / "r.html").read_text()


def test_a_workload_entry_that_is_not_name_equals_package_is_one_line(monkeypatch):
    from nnbench import workloads
    from nnbench.errors import NnbenchError
    with pytest.raises(NnbenchError, match="NNBENCH_WORKLOADS: 'toy' is not name=package"):
        workloads._extra("toy")
    assert workloads._extra("toy=toywl, b=x.y") == {"toy": "toywl", "b": "x.y"}
