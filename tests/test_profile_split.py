"""`nnbench profile --split phases|stages`: where a case's timed unit goes, part by part.

CPU: the refusals (one line, exit 2, before anything runs), the table and JSON from stand-in splits, the
splits' own arithmetic over stand-ins for the GPU objects, and the CLI's plumbing (the split reaches the
profiler, the table and the JSON line come out, a failed check exits 1). GPU: both splits for real, their
parts checked against the whole (`phases_plausible`, `stages_plausible`, which the CPU tests also run on a
planted bad split so that they are seen to fail).
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner
from rich.console import Console

from nnbench import nets, workloads
from nnbench.cli import cli
from nnbench.profiling import profile as profiler
from nnbench.report import tables
from nnbench.workloads import base, workload
from nnbench.workloads.conv import stages
from nnbench.workloads.train import fused, phases

NET8 = nets.get("8").layers
# The GPU checks' margins. Block 0's clocks run inside the launch whose CUDA events time the iteration, so the
# phases sum to at most the iteration (2% for the cycle-to-time conversion), and to no less than 90% of it:
# the launch's own start and end (loading and storing the weights) spread over 1,040 iterations (the phases
# summed to 50.04 us against 50.08 on an H100, lab/journal/fused.md).
PHASES_OF_ITERATION = (0.90, 1.02)
# A LeNet-5 stage timed alone pays its kernels' launch and tail, which overlap inside the step: the stages
# summed to 1.02-1.03x the launched step on an H100 (lab/journal/conv.md); a sum far off means a stage timed
# twice, left out, or in the wrong unit.
STAGES_OF_STEP = (0.8, 1.5)


def phases_plausible(split: base.TimeSplit, layers: tuple[int, ...], out_local: bool = True) -> None:
    assert split.kind == "phases" and split.status == "PASS", split
    assert [r["part"] for r in split.rows] == [n for n, _ in phases.phase_names(layers, out_local)]
    assert len(split.rows) == fused.phases_per_iteration(layers, out_local)
    assert all(r["wait"] >= 0 and r["work"] > 0 for r in split.rows), split.rows
    lo, hi = PHASES_OF_ITERATION
    assert lo * split.whole_s <= split.parts_s <= hi * split.whole_s, (split.parts_s, split.whole_s)
    assert set(split.ceiling_values) == set(phases.CEILINGS) and all(v > 0 for v in split.ceiling_values.values())


def stages_plausible(split: base.TimeSplit, stage_count: int) -> None:
    assert split.kind == "stages" and split.status == "PASS", split
    assert len(split.rows) == stage_count
    assert all(r["median"] > 0 and r["kernels"] >= 1 for r in split.rows), split.rows
    lo, hi = STAGES_OF_STEP
    assert lo * split.whole_s <= split.parts_s <= hi * split.whole_s, (split.parts_s, split.whole_s)


def a_phase_split(whole_us: float = 50.0) -> base.TimeSplit:
    """A stand-in for Net 8's phases: 26 phases of 0.9 us wait and 0.9 us work, 46.8 us of a 50 us iteration."""
    n = fused.phases_per_iteration(NET8, True)
    rows = phases.phase_rows(NET8, True, np.full(n, 0.9e-6), np.full(n, 0.9e-6))
    return base.TimeSplit("phases", "iteration", "block 0's clocks", whole_s=whole_us * 1e-6, timed=("wait", "work"),
                          counts=("values",), rows=rows, rel_err=1e-7, rtol=1e-5, ceilings=phases.CEILINGS,
                          ceiling_values={"handoff_us": 0.229, "grid_barrier_us": 1.028}, notes=("132 blocks",))


def rows_of(text: str) -> list[list[str]]:
    """Each line's cells, the table's rules dropped."""
    return [line.replace("│", " ").split() for line in text.splitlines()]


def text_of(renderables) -> str:
    console = Console(record=True, width=200)
    for r in renderables:
        console.print(r)
    return console.export_text()


# -- refusals ------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, line", [
    (["train", "-v", "kcm-mass", "--split", "phases"],
     "--split phases: kcm-mass keeps no phase clocks; give a persistent version: fused-barrier, fused-partials, "
     "fused"),
    (["train", "-v", "fused", "--split", "stages"], "--split stages: the train workload has no stages; profile conv "
                                                    "for them"),
    (["gemm", "-v", "tiled", "--split", "phases"], "--split phases: the gemm workload has no phases; profile train "
                                                   "for them"),
    (["conv", "-v", "tiled", "--split", "stages"],
     "--split stages: splits a whole model's step; give --model lenet5 and -v one of lenet5, lenet5-implicit"),
    (["conv", "-v", "tiled", "--model", "lenet5", "--split", "stages"],
     "--split stages: splits a whole model's step; give --model lenet5 and -v one of lenet5, lenet5-implicit"),
    (["conv", "-v", "lenet5", "--model", "lenet5", "--split", "phases"], "--split phases: the conv workload has no "
                                                                         "phases; profile train for them"),
    (["train", "-v", "fused", "--split", "waits"], "Invalid value for '--split': 'waits' is not one of 'phases', "
                                                   "'stages'."),
    # a split the case has, but no GPU to time it on
    (["train", "-v", "fused", "--net", "8", "--split", "phases"],
     "--split phases: times kernels on a GPU; needs the cuda backend (this run is on the cpu backend)"),
    (["conv", "-v", "lenet5", "--model", "lenet5", "--split", "stages"],
     "--split stages: times kernels on a GPU; needs the cuda backend (this run is on the cpu backend)"),
])
def test_a_split_the_case_has_not_is_one_line_and_exit_2(args, line):
    res = CliRunner().invoke(cli, ["profile", *args, "--backend", "cpu"])
    assert res.exit_code == 2, res.output
    assert res.output == f"nnbench: error: {line}\n", res.output


def test_every_split_is_offered_by_its_workload_and_named_in_the_option():
    offered = workloads.every_split()
    assert {k: names for k, (_, names) in offered.items()} == {"phases": ["train"], "stages": ["conv"]}
    assert all(kind in workload(names[0]).splits for kind, (_, names) in offered.items())


# -- the table and the JSON ------------------------------------------------------------------------
def test_the_phase_table_shows_each_phase_its_share_the_sum_and_the_ceilings():
    out = text_of(tables.split_tables(a_phase_split()))
    assert "phases · per iteration · block 0's clocks" in out
    # fwd 1 awaits the 500 outputs of layer 1: 0.9 + 0.9 us of a 50 us iteration is 3.6% of it
    assert ["fwd", "1", "500", "0.900", "0.900", "3.6%"] in rows_of(out), out
    assert ["bwd", "0", "500", "0.900", "0.900", "3.6%"] in rows_of(out), out
    # 26 phases: 23.4 us of wait, 23.4 of work, 93.6% of the iteration
    assert ["all", "phases", "23.400", "23.400", "93.6%"] in rows_of(out), out
    assert "the iteration timed whole: 50.000 us" in out
    assert "SM-to-SM handoff (one way) 0.229 us, grid barrier (one block per SM) 1.028 us" in out
    assert "float64 check: rel_err 1.0e-07 against 1.0e-05 PASS" in out


def test_the_stage_table_is_in_ms_and_a_failed_check_shows_no_times():
    split = base.TimeSplit("stages", "step", "measure", whole_s=0.3e-3, timed=("median",), counts=("kernels",),
                           rows=stages.stage_rows([("conv1 unroll forward", 0.0217, 3), ("SGD update", 0.0031, 1)]),
                           display="ms", rel_err=3.7e-5, rtol=1e-3)
    out = text_of(tables.split_tables(split))
    assert ["conv1", "unroll", "forward", "3", "0.0217", "7.2%"] in rows_of(out), out
    assert ["all", "stages", "0.0248", "8.3%"] in rows_of(out), out
    split.status, split.rows, split.rel_err = "FAIL", [], 0.5
    out = text_of(tables.split_tables(split))
    assert "stages: not timed: the build they are timed on failed its float64 check: rel_err 5.0e-01" in out
    assert "0.0217" not in out


def test_the_profile_json_carries_the_split_in_seconds_with_shares():
    split = a_phase_split()
    prof = profiler.Profile("train", workload("train").variants()[0], {}, "sm_90", "H100", split=split)
    line = profiler.as_json(prof, {})
    assert json.loads(json.dumps(line))["split"] == line["split"]  # plain JSON
    s = line["split"]
    assert s["kind"] == "phases" and s["unit"] == "iteration" and s["status"] == "PASS"
    assert s["whole_s"] == pytest.approx(50e-6) and s["parts_s"] == pytest.approx(46.8e-6)
    assert s["parts"][0] == {"part": "fwd 1", "values": 500, "wait": pytest.approx(0.9e-6),
                             "work": pytest.approx(0.9e-6), "share": pytest.approx(1.8 / 50)}
    assert s["ceilings"] == {"handoff_us": 0.229, "grid_barrier_us": 1.028}
    assert profiler.as_json(profiler.Profile("train", prof.variant, {}, "sm_90", "H100"), {})["split"] is None


# -- the splits' arithmetic over stand-ins of the GPU objects --------------------------------------
class StandInFusedNet:
    """FusedNet's part that phase_split reads: a launch of `iterations` in `seconds`, then its clocks in us."""

    blocks, out_local = 132, True

    def __init__(self, layers, seconds: float, wait_us: float, work_us: float) -> None:
        self.n = fused.phases_per_iteration(layers, True)
        self.seconds, self.wait_us, self.work_us, self.launches = seconds, wait_us, work_us, []

    def train(self, iterations: int, tolerance: float):
        self.launches.append(iterations)
        return self.seconds, []

    def phase_times(self, iterations: int):
        return np.full(self.n, self.wait_us), np.full(self.n, self.work_us), 1980.0


def run_phase_split(monkeypatch, err: float, net: StandInFusedNet):
    from nnbench.workloads.train import mlp
    monkeypatch.setattr(phases, "variant_module", lambda v, p, arch: ("module", p))
    monkeypatch.setattr(mlp, "check_version", lambda *a, **k: err)
    monkeypatch.setattr(mlp, "fused_net", lambda *a, **k: net)
    run = SimpleNamespace(be=SimpleNamespace(arch="sm_90"), layers=NET8, hyper=SimpleNamespace(max_iterations=1040),
                          train=[None] * 52, init=None, blocks=None, ref=None, rtol=1e-5, limit=lambda p: 1e-5)
    return phases.phase_split(run, workload("train").variants()[0], {"THREADS": 256})


def test_phase_split_is_per_iteration_in_seconds_after_its_check(monkeypatch):
    net = StandInFusedNet(NET8, seconds=0.052, wait_us=1.0, work_us=0.8)  # 1,040 iterations in 52 ms: 50 us each
    split = run_phase_split(monkeypatch, 1e-7, net)
    assert net.launches == [52, 1040]  # a warm-up launch of one epoch, then the timed one
    assert split.whole_s == pytest.approx(50e-6)
    assert split.rows[0] == {"part": "fwd 1", "values": 500, "wait": pytest.approx(1e-6), "work": pytest.approx(0.8e-6)}
    assert split.parts_s == pytest.approx(26 * 1.8e-6)
    assert split.rel_err == 1e-7 and split.rtol == 1e-5 and split.status == "PASS"
    phases_plausible(with_ceilings(split), NET8)  # 46.8 of 50 us: plausible


def test_a_phase_build_that_fails_its_check_is_not_timed(monkeypatch):
    net = StandInFusedNet(NET8, seconds=0.052, wait_us=1.0, work_us=0.8)
    for err in (1e-3, float("nan")):
        split = run_phase_split(monkeypatch, err, net)
        assert split.status == "FAIL" and split.rows == [] and net.launches == []


def with_ceilings(split: base.TimeSplit) -> base.TimeSplit:
    split.ceiling_values = {"handoff_us": 0.229, "grid_barrier_us": 1.028}
    return split


def test_the_gpu_checks_fail_a_planted_bad_split():
    phases_plausible(a_phase_split(50.0), NET8)
    with pytest.raises(AssertionError):  # the phases sum to under half the iteration: a clock lost
        phases_plausible(a_phase_split(100.0), NET8)
    with pytest.raises(AssertionError):  # to more than the iteration: a phase counted twice
        phases_plausible(a_phase_split(40.0), NET8)
    with pytest.raises(AssertionError):  # the phases of another net
        phases_plausible(a_phase_split(50.0), nets.get("1").layers)
    rows = stages.stage_rows([("a", 0.1, 2), ("b", 0.2, 1)])
    good = base.TimeSplit("stages", "step", "", whole_s=0.3e-3, timed=("median",), counts=("kernels",), rows=rows)
    stages_plausible(good, 2)
    with pytest.raises(AssertionError):  # a stage in the wrong unit
        stages_plausible(base.TimeSplit("stages", "step", "", whole_s=0.3, timed=("median",), counts=("kernels",),
                                        rows=rows), 2)
    with pytest.raises(AssertionError):  # a stage of no time
        stages_plausible(base.TimeSplit("stages", "step", "", whole_s=0.1e-3, timed=("median",), counts=("kernels",),
                                        rows=stages.stage_rows([("a", 0.1, 2), ("b", 0.0, 1)])), 2)


def test_stage_split_times_each_stage_and_the_step_after_the_check(monkeypatch):
    from nnbench.workloads.conv import lenet
    timed = [("conv1 unroll forward", 0.02, 3), ("SGD update", 0.003, 1)]
    net = SimpleNamespace(description="unroll path", step_launches=[], callable=lambda launches: "step")
    monkeypatch.setattr(lenet, "GpuLeNet", lambda *a: net)
    monkeypatch.setattr(lenet, "stage_times", lambda n, settings: timed)
    monkeypatch.setattr(stages.measure, "measure", lambda be, fn, settings: SimpleNamespace(median_ms=0.025))
    run = SimpleNamespace(be=None, params=None, x=None, labels=None, rate=0.05, batch=64, ref_loss=1.0,
                          ref_params=None, settings=None, limit=lambda: 1e-3)
    monkeypatch.setattr(lenet, "first_step_error", lambda *a: 3.7e-5)
    split = stages.stage_split(run, "unroll")
    assert split.whole_s == pytest.approx(25e-6) and split.status == "PASS"
    assert split.rows == [{"part": "conv1 unroll forward", "kernels": 3, "median": pytest.approx(20e-6)},
                          {"part": "SGD update", "kernels": 1, "median": pytest.approx(3e-6)}]
    stages_plausible(split, 2)
    monkeypatch.setattr(lenet, "first_step_error", lambda *a: 0.5)
    split = stages.stage_split(run, "unroll")
    assert split.status == "FAIL" and split.rows == [] and split.whole_s is None


def test_the_profiler_splits_on_the_cases_own_session_with_the_ceilings_measured_once(monkeypatch):
    """profile() on a stand-in device: the split comes from the session that ran the case, after it, even where
    the case failed its check; the ceilings are measured for a timed split only, and filled into it."""
    from nnbench.profiling import ceilings
    from nnbench.runtime.device import for_arch
    from nnbench.workloads.train import session as train
    made, measured = [], []

    class StandInSession:
        def __init__(self) -> None:
            self.calls = []
            made.append(self)

        def warm_up(self) -> None:
            pass

        def prepare(self, problem) -> None:
            self.calls.append("prepare")

        def run_case(self, case, problem, comp) -> dict:
            self.calls.append("case")
            return {"status": "FAIL", "median_ms": 0.05}

        def time_split(self, kind, case, problem):
            self.calls.append(kind)
            return split

    rep = SimpleNamespace(registers=64, smem_bytes=0, spill_store_bytes=0, spill_load_bytes=0, stack_bytes=0)
    monkeypatch.setattr(profiler, "compiled_for", lambda work, case, arch: SimpleNamespace(ptxas={"fused_train": rep}))
    monkeypatch.setattr(profiler, "add_mix", lambda kernels, comp: None)
    monkeypatch.setattr(workload("train"), "session", lambda *a, **k: StandInSession())
    monkeypatch.setattr(ceilings, "measure_ceilings",
                        lambda be: measured.append(be) or {"handoff_us": 0.25, "grid_barrier_us": 1.0, "other": 9.0})
    device = SimpleNamespace(device=for_arch("sm_90"), arch="sm_90", runs_kernels=True, name="cuda")
    problem = train.problem_for("8", max_iterations=1040, epochs=1, train_samples=20)
    split = a_phase_split()
    split.ceiling_values = {}
    prof = profiler.profile(device, "train", "fused", {}, problem, None, split="phases")
    assert [s.calls for s in made] == [["prepare", "case", "phases"]] and prof.split is split
    assert split.ceiling_values == {"handoff_us": 0.25, "grid_barrier_us": 1.0} and len(measured) == 1
    made.clear(), measured.clear()
    split = base.TimeSplit("phases", "iteration", "", status="FAIL", ceilings=phases.CEILINGS)
    prof = profiler.profile(device, "train", "fused", {}, problem, None, split="phases")
    assert prof.split is split and split.ceiling_values == {} and measured == []


# -- the command's plumbing, over a stand-in device and profiler ------------------------------------
@pytest.fixture
def standin_device(monkeypatch):
    """The command on a 'GPU' that a stand-in profiler answers: what reaches the profiler is kept."""
    from nnbench import results
    from nnbench.cli import profile as cmd
    device = SimpleNamespace(runs_kernels=True, name="cuda")
    asked: dict = {"opened": 0}

    def open_device(backend):
        asked["opened"] += 1
        return device
    monkeypatch.setattr(cmd, "open_device", open_device)
    monkeypatch.setattr(results, "environment", lambda be: {"backend": "cpu", "sms": 2})

    def stand_in(be, suite, name, overrides, problem, arch, with_ncu, child, kernel=None, case=None, split=None):
        asked.update(suite=suite, name=name, split=split, problem=problem)
        v = next(v for v in workload("train").variants() if v.name == name)
        return profiler.Profile("train", v, v.defaults(), "sm_90", "stand-in", split=asked["split_made"])
    monkeypatch.setattr(profiler, "profile", stand_in)
    return asked


def test_the_command_passes_the_split_and_prints_and_keeps_it(standin_device, tmp_path):
    standin_device["split_made"] = a_phase_split()
    out = tmp_path / "p.jsonl"
    res = CliRunner().invoke(cli, ["profile", "train", "-v", "fused", "--net", "8", "--split", "phases",
                                   "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert standin_device["split"] == "phases" and standin_device["problem"].layers == NET8
    assert "all phases" in res.output and "93.6%" in res.output
    line = json.loads(out.read_text().splitlines()[-1])  # after the header
    assert line["split"]["parts_s"] == pytest.approx(46.8e-6)
    jsonschema = pytest.importorskip("jsonschema")
    from nnbench import rawresults
    jsonschema.validate(line, rawresults.schema())
    failed = dict(line, split=dict(line["split"], status="FAIL", parts=[], whole_s=None, parts_s=None))
    jsonschema.validate(failed, rawresults.schema())
    with pytest.raises(jsonschema.ValidationError):  # a part without its share
        jsonschema.validate(dict(line, split=dict(line["split"], parts=[{"part": "fwd 1"}])), rawresults.schema())


def test_a_split_whose_check_fails_exits_1_after_its_line(standin_device):
    split = a_phase_split()
    split.status, split.rows = "FAIL", []
    standin_device["split_made"] = split
    res = CliRunner().invoke(cli, ["profile", "train", "-v", "fused", "--net", "8", "--split", "phases"])
    assert res.exit_code == 1, res.output
    assert "phases: not timed: the build they are timed on failed its float64 check" in res.output


def test_a_split_the_case_has_not_is_refused_before_the_device_opens(standin_device):
    res = CliRunner().invoke(cli, ["profile", "train", "-v", "kcm-mass", "--net", "8", "--split", "phases"])
    assert res.exit_code == 2 and "kcm-mass keeps no phase clocks" in res.output, res.output
    assert standin_device["opened"] == 0


def test_no_split_asked_none_made(standin_device):
    standin_device["split_made"] = None
    res = CliRunner().invoke(cli, ["profile", "train", "-v", "fused", "--net", "8"])
    assert res.exit_code == 0 and standin_device["split"] is None, res.output


# -- the parameter options: every listed workload's, none clashing --------------------------------
def test_profile_takes_every_parameter_of_every_workload_and_no_option_twice():
    command = cli.commands["profile"]
    opts = [o for p in command.params for o in p.opts]
    assert len(opts) == len(set(opts)), sorted(o for o in opts if opts.count(o) > 1)
    wanted = {p.option for name in workloads.WORKLOADS for v in workload(name).variants() for p in v.params}
    assert wanted and wanted <= set(opts), wanted - set(opts)


def test_a_new_workloads_parameter_becomes_an_option_and_a_clash_is_refused(monkeypatch):
    import click

    from nnbench.cli import app
    from nnbench.registry import Variant, param
    toy = SimpleNamespace(splits={}, variants=lambda: [
        Variant("toy", "scale", 1, "", "toy/01.cu", params=(param("BLOCK", 128, (64, 128), "threads per block"),))])
    monkeypatch.setitem(workloads.WORKLOADS, "toy", "toywl")
    real = workloads.workload
    monkeypatch.setattr(workloads, "workload", lambda name: toy if name == "toy" else real(name))

    @app.every_param_option
    @click.option("--m", type=int)
    def command(**kw):
        pass
    assert "--block" in {o for p in command.__click_params__ for o in p.opts}
    with pytest.raises(ValueError, match="kernel parameter BLOCK: its option --block is already clashing's own option"):
        @app.every_param_option
        @click.option("--block", is_flag=True)
        def clashing(**kw):
            pass


# -- on a GPU ------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_the_phases_of_fused_net8_add_up_to_its_iteration(cuda_backend):
    from nnbench.workloads.train import session as train
    problem = train.problem_for("8", max_iterations=1040, epochs=1, train_samples=20)
    prof = profiler.profile(cuda_backend, "train", "fused", {}, problem, None, split="phases")
    assert prof.record["status"] == "PASS"
    phases_plausible(prof.split, NET8)
    text_of(tables.profile_tables(prof))  # renders


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["lenet5", "lenet5-implicit"])
def test_the_stages_of_lenet5_add_up_to_its_step(cuda_backend, variant):
    from nnbench.workloads.conv import lenet
    from nnbench.workloads.conv.session import LeNetProblem
    if variant == "lenet5-implicit" and (why := workloads.get("conv", "implicit-wgmma").arch_problem(
            cuda_backend.device)):
        pytest.skip(why)
    prof = profiler.profile(cuda_backend, "conv", variant, {}, LeNetProblem(64), None, split="stages")
    assert prof.record["status"] == "PASS"
    net_stages = len(lenet.GpuLeNet(cuda_backend, lenet.init_params(0), *lenet.images(2, 0), 0.05,
                                    lenet.VARIANT_PATHS[variant]).stages)
    stages_plausible(prof.split, net_stages)


@pytest.mark.gpu
def test_the_phases_command_on_a_gpu(cuda_backend, tmp_path):
    out = tmp_path / "p.jsonl"
    res = CliRunner().invoke(cli, ["profile", "train", "-v", "fused", "--net", "8", "--split", "phases", "--json",
                                   str(out)])
    assert res.exit_code == 0, res.output
    assert "all phases" in res.output and "SM-to-SM handoff" in res.output
    line = json.loads(out.read_text().splitlines()[-1])  # after the header
    assert line["split"]["status"] == "PASS" and len(line["split"]["parts"]) == 26


def test_a_passing_case_without_flop_or_byte_counts_has_no_roofline_point(monkeypatch):
    """A whole model's step (LeNet-5) counts no FLOPs of its own: the profile has no point on the roofline, where
    it raised ValueError after the step had passed (seen on an H200 with --split stages)."""
    from nnbench.profiling import ceilings
    from nnbench.runtime.device import for_arch
    from nnbench.workloads.train import session as train

    class StandInSession:
        def warm_up(self) -> None:
            pass

        def prepare(self, problem) -> None:
            pass

        def run_case(self, case, problem, comp) -> dict:
            return {"status": "PASS", "median_ms": 0.3, "flops": 0.0, "precision": "FP32 FFMA"}

    rep = SimpleNamespace(registers=64, smem_bytes=0, spill_store_bytes=0, spill_load_bytes=0, stack_bytes=0)
    monkeypatch.setattr(profiler, "compiled_for", lambda work, case, arch: SimpleNamespace(ptxas={"fused_train": rep}))
    monkeypatch.setattr(profiler, "add_mix", lambda kernels, comp: None)
    monkeypatch.setattr(workload("train"), "session", lambda *a, **k: StandInSession())
    monkeypatch.setattr(ceilings, "measure_ceilings", lambda be: {"fma_tflops": 60.0, "copy_gbs": 3000.0})
    problem = train.problem_for("8", max_iterations=1040, epochs=1, train_samples=20)
    monkeypatch.setattr(type(problem), "flops", property(lambda self: 0.0), raising=False)
    device = SimpleNamespace(device=for_arch("sm_90"), arch="sm_90", runs_kernels=True, name="cuda")
    prof = profiler.profile(device, "train", "fused", {}, problem, None)
    assert prof.record["status"] == "PASS" and prof.where is None
