"""The statistical gate on synthetic samples (verdict.compare_samples), `nnbench check` on files with
raw samples and its formats, the JSON results format against its schema, and measure's NVML rules
with a scripted telemetry. CPU only."""

import csv
import json
import math
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from click.testing import CliRunner

from nnbench import measure, rawresults, results, verdict
from nnbench.cli import cli
from nnbench.runtime.nvml import Probe, throttled


def noisy(rng, median, rel_sigma, n):
    """Timing-like samples: a floor plus a right tail (a kernel is never faster than its floor)."""
    return median * (1 + rel_sigma * np.abs(rng.standard_normal(n)))


# -- compare_samples ------------------------------------------------------------------------------
def test_identical_distributions_give_no_false_slower():
    rng = np.random.default_rng(0)
    found = [verdict.compare_samples(noisy(rng, 1.0, 0.01, 20), noisy(rng, 1.0, 0.01, 20), 0.05).verdict
             for _ in range(500)]
    assert found.count("SLOWER") == 0 and found.count("FASTER") == 0
    assert found.count("SAME") == 500


def test_small_real_slowdown_is_caught_when_the_tolerance_allows_it():
    rng = np.random.default_rng(1)
    caught = sum(verdict.compare_samples(noisy(rng, 1.0, 0.005, 20), noisy(rng, 1.03, 0.005, 20), 0.02).verdict
                 == "SLOWER" for _ in range(100))
    assert caught == 100
    # the same slowdown under a 5% tolerance is, by design, SAME
    s = verdict.compare_samples(noisy(rng, 1.0, 0.005, 20), noisy(rng, 1.03, 0.005, 20), 0.05)
    assert s.verdict == "SAME" and 1.02 < s.ratio < 1.04


def test_noise_never_hides_a_large_regression_as_same():
    rng = np.random.default_rng(2)
    for _ in range(200):
        base = noisy(rng, 1.0, 0.01, 20)
        cur = 1.2 * (1 + 0.6 * rng.random(20)) * (rng.random(20) < 0.7) + 1.2 * (rng.random(20) >= 0.7)
        assert verdict.compare_samples(base, cur, 0.05).verdict in ("SLOWER", "UNSTABLE")


def test_a_noisy_side_inside_the_tolerance_is_unstable_not_same():
    rng = np.random.default_rng(3)
    wide = rng.permutation(1.0 + 0.3 * np.linspace(-1, 1, 21))  # median exactly 1.0, spread ±30%
    s = verdict.compare_samples(noisy(rng, 1.0, 0.01, 20), wide, 0.05)
    assert s.verdict == "UNSTABLE" and "too noisy" in s.why


def test_a_change_the_rank_test_cannot_confirm_is_unstable():
    base = np.array([1.0, 1.5, 1.0, 1.5, 1.0, 1.5])
    cur = np.array([1.1, 1.6, 1.1, 1.6, 1.1, 1.6])
    s = verdict.compare_samples(base, cur, 0.05)
    assert s.verdict == "UNSTABLE" and s.p_value >= verdict.ALPHA and "cannot tell" in s.why


def test_a_known_between_run_spread_raises_the_tolerance():
    rng = np.random.default_rng(8)
    base, cur = noisy(rng, 1.0, 0.002, 20), noisy(rng, 1.03, 0.002, 20)
    assert verdict.compare_samples(base, cur, 0.02).verdict == "SLOWER"
    assert verdict.compare_samples(base, cur, 0.02, run_spread=0.008).verdict == "SAME"  # 5 x 0.8% = 4%
    assert verdict.compare_samples(base, cur, 0.02, run_spread=0.002).verdict == "SLOWER"


def test_five_launches_a_side_decide_by_complete_separation():
    """configs/ci.yaml times a per-sample trainer in five launches: no rank test on 5 against 5 can reach
    ALPHA (its floor is 1/252), so a 4x slowdown of `fused` read UNSTABLE on the H100. Complete
    separation beyond the tolerance is SLOWER; overlapping samples stay UNSTABLE; 20 a side still go
    through the rank test alone."""
    base = np.array([7.6, 7.7, 7.5, 7.6, 7.8])
    s = verdict.compare_samples(base, base * 4.3, 0.05)
    assert s.verdict == "SLOWER" and "every sample" in s.why
    assert verdict.compare_samples(base, base[::-1] * 0.7, 0.05).verdict == "FASTER"
    overlapping = np.array([7.9, 8.3, 8.4, 8.5, 7.7])  # +9% by the medians, one sample among the baseline's
    assert verdict.compare_samples(base, overlapping, 0.05).verdict == "UNSTABLE"
    rng = np.random.default_rng(3)
    b20 = noisy(rng, 1.0, 0.002, 20)
    assert verdict.compare_samples(b20, b20 * 1.003, 0.05).verdict == "SAME"  # separated, inside the tolerance


def test_too_few_samples_is_ambiguous():
    s = verdict.compare_samples([1.0, 1.0, 1.0, 1.0], [2.0] * 20, 0.05)
    assert s.verdict == "AMBIGUOUS" and "too few" in s.why


def test_faster_is_symmetric():
    rng = np.random.default_rng(4)
    assert verdict.compare_samples(noisy(rng, 1.0, 0.005, 20), noisy(rng, 0.8, 0.005, 20), 0.05).verdict == "FASTER"


# -- check on files with raw samples ---------------------------------------------------------------
def rec(variant, samples, status="PASS", shape="64×64×64", workload="gemm", **kw):
    st = measure.summarize(samples) if samples else None
    r = dict(workload=workload, variant=variant, params="", shape=shape, cold=False, status=status, gpu="GPU-A",
             backend="cuda", git_sha="abc", timestamp="2026-11-24T00:00:00+00:00", rtol=5e-5, rel_err=1e-7,
             unit="launch", **(st.as_record() if st else {}))
    r.update(kw)
    return r


def write(sink, path, recs):
    out = sink(path)
    for r in recs:
        out.append(r)
    out.close()
    return path


def write_csv(path, recs):
    return write(results.CsvSink, path, recs)


def write_json(path, recs):
    return write(rawresults.JsonSink, path, recs)


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(5)
    wide = rng.permutation(1.0 + 0.3 * np.linspace(-1, 1, 31))  # median 1.0, spread ±30%
    base = [rec("steady", list(noisy(rng, 1.0, 0.005, 30))), rec("slowed", list(noisy(rng, 2.0, 0.005, 30))),
            rec("shaky", list(noisy(rng, 1.0, 0.005, 30))),
            rec("conv1", list(noisy(rng, 3.0, 0.005, 30)), workload="conv")]
    cur = [rec("steady", list(noisy(rng, 1.0, 0.005, 30))), rec("slowed", list(noisy(rng, 2.4, 0.005, 30))),
           rec("shaky", list(wide)), rec("conv1", list(noisy(rng, 3.0, 0.005, 30)), workload="conv")]
    return write_csv(tmp_path / "b.csv", base), write_json(tmp_path / "c.jsonl", cur)


def test_check_on_raw_samples_csv_against_json(files):
    b, c = files
    res = CliRunner().invoke(cli, ["check", str(b), str(c)])
    assert res.exit_code == 1, res.output
    out = res.output
    assert "SLOWER" in out and "UNSTABLE" in out and "rank 30/30" in out
    assert "gemm: geometric-mean change" in out and "conv: geometric-mean change" in out


def test_allow_unstable_lets_only_unstable_pass(tmp_path):
    rng = np.random.default_rng(6)
    b = write_csv(tmp_path / "b.csv", [rec("shaky", list(noisy(rng, 1.0, 0.005, 30)))])
    c = write_csv(tmp_path / "c.csv", [rec("shaky", list(rng.permutation(1.0 + 0.3 * np.linspace(-1, 1, 31))))])
    assert CliRunner().invoke(cli, ["check", str(b), str(c)]).exit_code == 1
    res = CliRunner().invoke(cli, ["check", str(b), str(c), "--allow-unstable"])
    assert res.exit_code == 0, res.output


def test_formats(files):
    b, c = files
    runner = CliRunner()
    md = runner.invoke(cli, ["check", str(b), str(c), "--format", "markdown"])
    assert md.exit_code == 1 and md.output.startswith("### nnbench check: FAILED")
    assert "| SLOWER | gemm | slowed |" in md.output and "| gemm |" in md.output
    js = runner.invoke(cli, ["check", str(b), str(c), "--format", "json"])
    doc = json.loads(js.stdout)
    assert js.exit_code == 1 and doc["passed"] is False and doc["counts"]["SLOWER"] == 1
    assert {x["variant"]: x["verdict"] for x in doc["cases"]}["steady"] == "SAME"
    assert doc["geomean_change"]["conv"]["cases"] == 1
    ju = runner.invoke(cli, ["check", str(b), str(c), "--format", "junit"])
    root = ET.fromstring(ju.stdout)
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert suites["gemm"].get("failures") == "2" and suites["conv"].get("failures") == "0"
    assert {f.get("type") for f in root.iter("failure")} == {"SLOWER", "UNSTABLE"}


def test_old_csv_without_samples_falls_back_and_says_so(tmp_path):
    rng = np.random.default_rng(7)
    old = rec("steady", list(noisy(rng, 1.0, 0.005, 30)))
    old.pop("samples_ms")
    b = write_csv(tmp_path / "b.csv", [old])
    c = write_csv(tmp_path / "c.csv", [rec("steady", list(noisy(rng, 1.0, 0.005, 30)))])
    res = CliRunner().invoke(cli, ["check", str(b), str(c), "--all"])
    assert res.exit_code == 0, res.output
    assert "older IQR rule" in res.output and "IQR ±" in res.output


# -- the JSON results format -----------------------------------------------------------------------
def test_written_file_validates_against_the_schema(tmp_path, files):
    jsonschema = pytest.importorskip("jsonschema")
    _, c = files
    schema = rawresults.schema()
    lines = c.read_text().splitlines()
    for line in lines:
        jsonschema.validate(json.loads(line), schema)
    bad = json.loads(lines[1])
    bad["raw"]["ms"] = []
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_schema_names_every_csv_column():
    props = rawresults.schema()["$defs"]["record"]["properties"]
    assert set(results.FIELDS) - {"samples_ms"} <= set(props) and "raw" in props


def test_round_trip_keeps_samples_and_non_finite_numbers(tmp_path):
    r = rec("failing", [1.0, 2.0, 3.0], status="FAIL", rel_err=math.inf)
    p = write_json(tmp_path / "r.jsonl", [r])
    back = rawresults.load(p)[0]
    assert list(back.samples_ms) == [1.0, 2.0, 3.0] and back.reps == 1 and back.unit == "launch"
    assert back.fields["rel_err"] == math.inf and back.key == results.case_key_of(r)
    csv_back = rawresults.load(write_csv(tmp_path / "r.csv", [r]))[0]
    assert list(csv_back.samples_ms) == [1.0, 2.0, 3.0]


def test_a_cut_short_last_line_is_set_aside(tmp_path):
    p = write_json(tmp_path / "r.jsonl", [rec("a", [1.0] * 5), rec("b", [1.0] * 5)])
    p.write_text(p.read_text()[:-40])
    notes = []
    assert [r.fields["variant"] for r in rawresults.load(p, notes)] == ["a"] and "cut short" in notes[0]


@pytest.mark.parametrize("content, message", [
    ('{"format": "nnbench-results", "schema_version": 99}\n', "schema_version 99 is newer"),
    ('{"format": "something-else"}\n', "not an nnbench JSON results file"),
    ('{"format": "nnbench-results", "schema_version": 1}\nnot json\n{"suite": "x"}\n', ":2: not a JSON object"),
])
def test_bad_json_files_are_one_line_exit_2(tmp_path, content, message):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content)
    good = write_csv(tmp_path / "g.csv", [rec("a", [1.0] * 5)])
    res = CliRunner().invoke(cli, ["check", str(bad), str(good)])
    assert res.exit_code == 2 and message in res.output and len(res.output.strip().splitlines()) == 1, res.output


def test_json_is_never_overwritten_and_leaves_no_csv_behind(tmp_path):
    taken = write_json(tmp_path / "taken.jsonl", [rec("a", [1.0] * 5)])
    before = taken.read_text()
    res = CliRunner().invoke(cli, ["gemm", "--backend", "cpu", "--size", "32", "--budget", "0.01", "--csv",
                                   str(tmp_path / "new.csv"), "--json", str(taken)])
    assert res.exit_code == 2 and "never overwrites" in res.output
    assert taken.read_text() == before and not (tmp_path / "new.csv").exists()


def test_gemm_json_on_the_cpu_has_samples_and_no_telemetry(tmp_path):
    res = CliRunner().invoke(cli, ["gemm", "--backend", "cpu", "--size", "32", "--budget", "0.01", "--csv",
                                   str(tmp_path / "g.csv"), "--json", str(tmp_path / "g.jsonl")])
    assert res.exit_code == 0, res.output
    recs = rawresults.load(tmp_path / "g.jsonl")
    assert recs and all(r.samples_ms is not None and r.samples_ms.size == r.fields["samples"] for r in recs)
    assert all(r.fields["power_w"] is None and r.fields["sm_clock_mhz"] is None for r in recs)
    with open(tmp_path / "g.csv") as f:
        row = next(csv.DictReader(f))
    assert len(row["samples_ms"].split()) == int(row["samples"]) and row["energy_j"] == ""


# -- measure with NVML's readings scripted ---------------------------------------------------------
class Telemetry:
    """nvml.Telemetry's surface, with scripted readings; the energy counter answers for long windows."""

    max_sm_mhz = 1980.0
    power_method = "instant power"

    def __init__(self, probes, window_s=0.01):
        self.probes = iter(probes)
        self.energy_j = self.window_s = None
        self.window, self.expected = window_s, None

    def start(self, expect_s=0.0):
        self.expected = expect_s

    def stop(self):
        self.window_s = self.window
        self.energy_j = 600.0 * self.window if self.window >= 1.0 else None

    def probe(self):
        return next(self.probes)

    def throttled(self, p):
        return throttled(p.sm_mhz, p.reasons, self.max_sm_mhz)


class Backend:
    name = "fake"
    runs_kernels = True

    def __init__(self, probes, window_s=0.01):
        self.tel = Telemetry(probes, window_s)

    def telemetry(self):
        return self.tel

    def issued_by_host(self, fn):
        return False

    def timed(self, fn, reps, during=None):
        if during is not None:
            during()
        return 1.0

    def timed_samples(self, fn, reps, count, during=None):
        if during is not None:  # (measure's check of a long host read queues one launch without a probe)
            during()
        return [1.0] * count

    def sm_clock_mhz(self):
        return None


def test_throttled_batches_are_dropped_and_counted():
    probes = [Probe(1900.0, 2619.0, 0x4, 700.0)] * 2 + [Probe(1200.0, 2619.0, 0, 100.0)] + \
        [Probe(1980.0, 2619.0, 0x2, 300.0)] * 50
    s = measure.measure(Backend(probes), lambda: None, measure.TimingSettings(budget_s=0.5))
    assert s.dropped == 30 and s.samples == 10 and s.throttle == "sw_power_cap" and s.clocks_locked
    assert s.sm_clock_mhz == 1980.0 and s.sm_clock_min_mhz == 1980.0 and s.mem_clock_mhz == 2619.0
    # a short window: the power is the kept batches' readings, not the energy counter's 100 ms steps
    assert s.energy_method == "instant power" and s.power_w == pytest.approx(300.0)
    assert s.energy_j is None and s.energy_note == measure.ENERGY_OFF  # never 300 W x 1 ms (docs/ENERGY.md)


def test_long_windows_take_the_energy_counter():
    be = Backend([Probe(1980.0, 2619.0, 0, 300.0)] * 50, window_s=2.0)
    s = measure.measure(be, lambda: None, measure.TimingSettings(budget_s=2.0))
    assert be.tel.expected == 2.0 and s.energy_method == "counter"
    assert s.power_w == pytest.approx(600.0) and s.energy_j is None  # joules come from --energy's own window


def test_keep_throttled_keeps_them():
    probes = [Probe(1000.0, 2619.0, 0x20)] * 50
    s = measure.measure(Backend(probes), lambda: None, measure.TimingSettings(budget_s=10, keep_throttled=True))
    assert s.dropped == 0 and s.samples == 10 and s.throttle == "sw_thermal" and s.sm_clock_mhz == 1000.0


def test_a_gpu_throttled_throughout_still_reports_and_says_why():
    probes = [Probe(1000.0, 2619.0, 0)] * 10_000
    s = measure.measure(Backend(probes), lambda: None, measure.TimingSettings(budget_s=0.0))
    assert s.samples >= 10 and s.dropped == 0 and s.sm_clock_mhz == 1000.0


def test_host_issued_samples_are_probed_once_a_batch_while_they_run(monkeypatch):
    """A probe after every host-issued sample left the GPU idle for its cost each time: one probe per BATCH
    samples now, taken inside `timed` (before it waits), and its verdict covers the samples of its group."""
    monkeypatch.setattr(measure, "HOST_WINDOW_MS", 0.0)  # the probes' cadence, not the window, is tested here
    probes = [Probe(1980.0, 2619.0, 0, 300.0), Probe(1000.0, 2619.0, 0, 300.0)] + [Probe(1980.0, 2619.0, 0, 300.0)] * 50
    be = Backend(probes)
    s = measure.measure(be, lambda: None, measure.TimingSettings(budget_s=10.0, min_samples=25, host_issued=True))
    used = 52 - sum(1 for _ in be.tel.probes)
    assert s.samples == 25 and s.dropped == measure.BATCH  # the second group of BATCH samples ran slow
    assert used == -(-(s.samples + s.dropped) // measure.BATCH)  # one probe per BATCH samples
    assert s.sm_clock_mhz == 1980.0 and s.sm_clock_min_mhz == 1980.0


def test_a_trainers_runs_carry_nvml_and_drop_throttled_runs():
    """measure.RunWatch: the runs a trainer times itself (epochs, fused launches) get one probe each;
    the warm-up run is left out, a throttled run is dropped from the statistics and counted, the
    clocks and power are the kept runs', and a long window takes the energy counter."""
    probes = [Probe(1980.0, 2619.0, 0, 300.0), Probe(1980.0, 2619.0, 0, 310.0), Probe(1980.0, 2619.0, 0x20, 500.0),
              Probe(1950.0, 2619.0, 0, 320.0)]
    be = Backend(probes)
    watch = measure.RunWatch(be)
    runs = [9.0, 2.0, 5.0, 2.2]
    for _ in runs:
        be.timed(None, 1, watch.during)
    s = watch.stats(runs, skip=1)
    assert be.tel.expected >= 1.0  # the counter is asked for: a trainer's window usually lasts
    assert s.samples == 2 and s.dropped == 1 and s.median_ms == pytest.approx(2.1)
    assert s.throttle == "sw_thermal" and s.sm_clock_min_mhz == 1950.0 and s.mem_clock_mhz == 2619.0
    assert s.energy_method == "instant power" and s.power_w == pytest.approx(315.0)
    assert s.energy_j is None and s.energy_note == measure.ENERGY_OFF  # never 315 W x 2.1 ms
    long = Backend([Probe(1980.0, 2619.0, 0, 300.0)] * 3, window_s=2.0)
    w = measure.RunWatch(long)
    for _ in range(3):
        long.timed(None, 1, w.during)
    assert w.stats([3.0, 1.0, 1.0], skip=1).energy_method == "counter"
    assert measure.RunWatch(object()).during is None  # no NVML (the CPU backend): nothing to call
    assert measure.RunWatch(object()).stats([1.0, 2.0, 3.0], skip=1).sm_clock_mhz is None


def test_throttle_rule():
    assert throttled(1400.0, 0, 1980.0) is True  # under 75% of the maximum
    assert throttled(1500.0, 0, 1980.0) is False
    assert throttled(1980.0, 0x40, 1980.0) is True  # hardware thermal slowdown
    assert throttled(1980.0, 0x1 | 0x2, 1980.0) is False  # idle and user clocks are not throttling


def test_a_side_throttled_throughout_is_unstable_not_slower(tmp_path):
    """On the H100 an unchanged kernel read 6.3% slower in a run whose every batch ran under the power cap (SM
    clock 1,635-1,860 MHz; measure kept them, having nothing else): UNSTABLE, saying why, never SLOWER. A run
    whose throttled batches were dropped is compared as usual."""
    rng = np.random.default_rng(9)
    base = rec("k", list(noisy(rng, 1.0, 0.002, 40)), throttle="", dropped=0, sm_clock_mhz=1980.0)
    capped = rec("k", list(noisy(rng, 1.063, 0.002, 40)), throttle="sw_power_cap", dropped=0, sm_clock_mhz=1860.0,
                 sm_clock_min_mhz=1635.0)
    cleaned = rec("k", list(noisy(rng, 1.063, 0.002, 40)), throttle="sw_power_cap", dropped=30, sm_clock_mhz=1980.0)
    b = write_csv(tmp_path / "b.csv", [base])
    (v,) = verdict.compare(verdict.load(b), verdict.load(write_csv(tmp_path / "c.csv", [capped])), 0.05)
    assert v.verdict == "UNSTABLE" and "throttled throughout (sw_power_cap, SM clock 1,635-1,860 MHz)" in v.why
    (v,) = verdict.compare(verdict.load(b), verdict.load(write_csv(tmp_path / "d.csv", [cleaned])), 0.05)
    assert v.verdict == "SLOWER"


def test_a_limit_only_slows_so_a_capped_run_keeps_the_verdicts_it_cannot_explain(tmp_path):
    """Session 7 on the H100: the power-cap flag held every batch of tiled 2048^3 in 4 of 43 fresh runs at an SM
    clock of 1,890-1,965 MHz, each within 0.7% of the baseline, and each failed the gate as UNSTABLE. A limit only
    slows a kernel: a capped current run that is not slower is SAME (saying it was capped); a capped baseline that
    the current run is slower than is SLOWER; what the cap could explain stays UNSTABLE."""
    rng = np.random.default_rng(19)

    def one(name, median, capped):
        cap = dict(throttle="sw_power_cap", dropped=0, sm_clock_mhz=1965.0, sm_clock_min_mhz=1890.0) if capped else \
            dict(throttle="", dropped=0, sm_clock_mhz=1980.0)
        return write_csv(tmp_path / f"{name}.csv", [rec("k", list(noisy(rng, median, 0.002, 40)), **cap)])

    def judged(base, cur):
        (v,) = verdict.compare(verdict.load(base), verdict.load(cur), 0.02)
        return v

    free, capped_base = one("free", 1.0, False), one("capped_base", 1.0, True)
    v = judged(free, one("capped_same", 1.003, True))
    assert v.verdict == "SAME" and "ran throttled throughout" in v.why and "not slower for it" in v.why, v.why
    assert judged(free, one("capped_faster", 0.9, True)).verdict == "FASTER"
    assert judged(free, one("capped_slower", 1.109, True)).verdict == "UNSTABLE"  # the +10.9% at 1,590 MHz
    assert judged(capped_base, one("slower", 1.1, False)).verdict == "SLOWER"
    v = judged(capped_base, one("same", 1.0, False))  # a regression as large as the cap could hide in it
    assert v.verdict == "UNSTABLE" and "the baseline ran throttled throughout" in v.why
    assert judged(capped_base, one("both", 1.0, True)).verdict == "UNSTABLE"


# -- a baseline of several runs ---------------------------------------------------------------------
def several_runs(tmp_path, rng, runs=10):
    """`runs` baseline runs in a folder: `tiny` moves 3% between runs (its samples 0.3% inside each), as the
    H100's 16 us convolutions do between processes; `steady` moves 0.2%."""
    folder = tmp_path / "baseline"
    folder.mkdir()
    for i in range(runs):
        tiny = 0.016 * (1 + 0.03 * rng.standard_normal())
        steady = 3.45 * (1 + 0.002 * rng.standard_normal())
        write_csv(folder / f"run-{i:02d}.csv", [rec("tiny", list(noisy(rng, tiny, 0.003, 200)), workload="conv"),
                                                 rec("steady", list(noisy(rng, steady, 0.003, 60)), workload="conv")])
    return folder


def test_a_baseline_of_several_runs_gives_each_case_its_own_tolerance(tmp_path):
    rng = np.random.default_rng(11)
    folder = several_runs(tmp_path, rng)
    runs = sorted(folder.glob("*.csv"))
    base = verdict.load_baseline(folder)
    assert base.attrs["runs"] == 10 and "pools 10 runs" in base.attrs["notes"][-1]
    tiny, steady = (base.loc[[k for k in base.index if v in k][0]] for v in ("tiny", "steady"))
    assert 0.015 < tiny["run_spread"] < 0.06 and steady["run_spread"] < 0.005  # measured from the 10 medians
    assert len(verdict.samples_of(tiny)) == 2000  # every run's samples pooled
    lowest = min(runs, key=lambda p: float(verdict.load(p).iloc[0]["median_ms"]))
    cur = write_csv(tmp_path / "cur.csv", [  # tiny 7% above the runs' middle, steady 3% above
        rec("tiny", list(noisy(rng, 0.016 * 1.07, 0.003, 200)), workload="conv"),
        rec("steady", list(noisy(rng, 3.45 * 1.03, 0.003, 60)), workload="conv")])
    # against one run, the tiny case's move between processes is a "regression"; against the ten, it is inside
    # 5x its spread, while steady's 3% (over the 2% floor, above 5 x 0.2%) is caught
    one = {v.variant: v.verdict for v in api_check([lowest], cur, 0.05).verdicts}
    assert one["tiny"] == "SLOWER"
    found = {v.variant: v.verdict for v in api_check([folder], cur, verdict.default_tolerance(True)).verdicts}
    assert found == {"tiny": "SAME", "steady": "SLOWER"}
    res = CliRunner().invoke(cli, ["check", str(folder), str(cur)])  # the default tolerance follows the baseline
    assert res.exit_code == 1 and "raised per case" in res.output and "pools 10 runs" in res.output, res.output
    unchanged = write_csv(tmp_path / "same.csv",
                          [rec("tiny", list(noisy(rng, 0.016 * 1.07, 0.003, 200)), workload="conv"),
                           rec("steady", list(noisy(rng, 3.45, 0.003, 60)), workload="conv")])
    res = CliRunner().invoke(cli, ["check", *map(str, runs), str(unchanged)])  # the runs named one by one
    assert res.exit_code == 0 and "regression gate: passed" in res.output, res.output


def test_a_baseline_run_throttled_throughout_is_left_out_of_the_pool_not_passed_on_to_every_check(tmp_path):
    """Session 7 on the H100: one baseline run of ten held tiled 2048^3 under the power cap throughout (SM clock
    1,890-1,965 MHz); the pooled row took that run's throttle, and an unthrottled identical run checked against the
    ten read UNSTABLE ("the baseline ran throttled throughout"). The capped run is left out of the pool and the
    others decide; a baseline throttled in all but one run still says so."""
    rng = np.random.default_rng(17)
    folder = tmp_path / "baseline"
    folder.mkdir()
    for i in range(10):
        last = i == 9
        write_csv(folder / f"run-{i:02d}.csv", [rec("k", list(noisy(rng, 1.05 if last else 1.0, 0.002, 20)),
                                                    throttle="sw_power_cap" if last else "", dropped=0,
                                                    sm_clock_mhz=1950.0 if last else 1980.0, sm_clock_min_mhz=1890.0)])
    cur = write_csv(tmp_path / "cur.csv", [rec("k", list(noisy(rng, 1.0, 0.002, 20)), throttle="", dropped=0)])
    (v,) = api_check([folder], cur, verdict.default_tolerance(True)).verdicts
    assert v.verdict == "SAME", v.why
    base = verdict.load_baseline(folder)
    assert base.iloc[0]["runs"] == 9 and "1 case left out a baseline run that ran throttled throughout" in \
        base.attrs["notes"]
    for i in range(1, 10):  # now nine of ten capped: no two runs free of it
        f = folder / f"run-{i:02d}.csv"
        row = dict(verdict.load(f).iloc[0], throttle="sw_power_cap")
        f.unlink()  # (a results file is never overwritten)
        write_csv(f, [row])
    (v,) = api_check([folder], cur, verdict.default_tolerance(True)).verdicts
    assert v.verdict == "UNSTABLE" and "the baseline ran throttled throughout" in v.why


def test_a_baseline_of_runs_from_two_gpus_or_an_empty_folder_is_refused_in_one_line(tmp_path):
    rng = np.random.default_rng(3)
    folder = several_runs(tmp_path, rng, runs=3)
    write_csv(folder / "other.csv", [rec("tiny", list(noisy(rng, 0.016, 0.003, 50)), workload="conv", gpu="GPU-B")])
    cur = write_csv(tmp_path / "cur.csv", [rec("tiny", list(noisy(rng, 0.016, 0.003, 50)), workload="conv")])
    empty = tmp_path / "empty"
    empty.mkdir()
    for base, needle in ((folder, "several GPUs"), (empty, "no result files"), (tmp_path / "nope", "no such file")):
        res = CliRunner().invoke(cli, ["check", str(base), str(cur)])
        lines = [ln for ln in res.output.splitlines() if ln.strip()]
        assert res.exit_code == 2 and len(lines) == 1 and needle in lines[0], res.output


def api_check(base, cur, tolerance):
    from nnbench import api
    return api.check([str(b) for b in base], str(cur), tolerance)
