"""configs/sanitize.yaml, the run of `--sanitize` over every shipped kernel: every registry variant with a .cu file
is a case of its plan, runnable at one of its shapes (a new kernel without sanitizer coverage fails here), and
the few kernels that no workload runs as a case of their own are named with the command that sanitizes them."""

from __future__ import annotations

from pathlib import Path

from nnbench import paths, workloads
from nnbench.sweeps import config, sanitized

CONFIG = Path(paths.ROOT) / "configs" / "sanitize.yaml"
DOC = Path(paths.ROOT) / "docs" / "SANITIZE.md"


def gpu_kernels():
    return [v for v in workloads.all_variants() if v.source and v.source.endswith(".cu") and v.backend == "cuda"]


def test_every_registry_kernel_is_a_case_of_the_sanitize_config():
    planned = {(job.case.variant.workload, job.case.variant.name)
               for _, job in sanitized.plan(config.load_config(CONFIG), "cuda")}
    for v in gpu_kernels():
        sweepable = v.name in {u.name for u in workloads.workload(v.workload).variants("cuda")}
        if sweepable:
            assert (v.workload, v.name) in planned, f"{v.workload} {v.name} ({v.source}) is not in {CONFIG.name}"


def test_the_kernels_no_workload_runs_as_a_case_are_named_with_their_command():
    # pooling is a step inside LeNet-5, not a case: the doc names where each such kernel runs under the tool
    doc = DOC.read_text()
    for v in gpu_kernels():
        if v.name not in {u.name for u in workloads.workload(v.workload).variants("cuda")}:
            assert f"`{v.workload} {v.name}` ({v.source})" in doc, f"{v.workload} {v.name}: no sanitize command"


def test_the_config_plans_every_kernel_path_it_names():
    specs = config.load_config(CONFIG)
    planned = sanitized.plan(specs, "cuda")
    # every variant the config lists runs at one shape at least (none refused at every shape)
    listed = {(s.workload_name, c.variant.name) for s in specs for c in s.cases}
    assert listed == {(j.case.variant.workload, j.case.variant.name) for _, j in planned}
    step9 = {j.case.param_label for _, j in planned if j.case.variant.name == "tf32x3_wgmma"}
    for path in ("PERSISTENT=1 CLUSTER_M=1", "PERSISTENT=1 CLUSTER_M=2", "PERSISTENT=0 CLUSTER_M=2", "ADAPT=0",
                 "SPLIT_K=4", "SPLIT_B=1"):
        assert any(path in label for label in step9), path
    assert any("PERSISTENT=1 CLUSTER_M=2" in label and "SPLIT_B=1" in label for label in step9)  # both copies multicast
    assert len(planned) == 135  # docs/SANITIZE.md and the config's header give this count
