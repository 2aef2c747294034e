"""`--json FILE` on every command: each kind of file (results, profile, devices, check; history's in
tests/test_history.py) validates
against nnbench/schema/results.schema.json, is never written over, and is refused by a reader of
another kind. All on the CPU (a GPU's device line through a scripted NVML)."""

from __future__ import annotations

import json
import sys
import types

import numpy as np
import pytest
from click.testing import CliRunner

from nnbench import measure, rawresults, results, runtime, workloads
from nnbench.cli import cli
from nnbench.errors import BackendUnavailable
from nnbench.runtime.device import DeviceInfo

jsonschema = pytest.importorskip("jsonschema")


def lines(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def valid(path, kind: str) -> list[dict]:
    """The file's lines after a header of `kind`, each checked against the schema."""
    schema = rawresults.schema()
    objs = lines(path)
    for obj in objs:
        jsonschema.validate(obj, schema)
    assert objs[0]["format"] == "nnbench-results" and objs[0]["kind"] == kind
    assert objs[0]["schema_version"] == rawresults.SCHEMA_VERSION
    return objs[1:]


def result_csv(path, variants=("a", "b"), workload="gemm"):
    rng = np.random.default_rng(3)
    sink = results.CsvSink(path)
    for v in variants:
        ms = list(1.0 + 0.01 * rng.random(12))
        sink.append(dict(workload=workload, variant=v, params="", shape="33×17×9", cold=False, status="PASS", gpu="cpu",
                         backend="cpu", git_sha="abc", timestamp="2026-11-24T00:00:00+00:00", rtol=5e-5, rel_err=1e-7,
                         unit="launch", **measure.summarize(ms).as_record()))
    sink.close()
    return path


def leaves(group, prefix=""):
    """Every runnable command, subcommands of groups included (`history record`)."""
    for name, c in group.commands.items():
        yield from leaves(c, f"{prefix}{name} ") if hasattr(c, "commands") else [(f"{prefix}{name}", c)]


def test_every_command_takes_json():
    """Every runnable command, `history record` and `history show` included (their files: tests/test_history.py)."""
    lacking = [name for name, c in leaves(cli) if "json_path" not in {p.name for p in c.params}]
    assert not lacking, f"no --json on: {', '.join(lacking)}"


# -- profile --------------------------------------------------------------------------------------
def test_profile_json_is_what_the_tables_print(tmp_path):
    out = tmp_path / "p.jsonl"
    res = CliRunner().invoke(cli, ["profile", "gemm", "-v", "coarsened", "--ts", "32", "--wpt", "8", "--backend", "cpu",
                                   "--arch", "sm_90", "--json", str(out)])
    assert res.exit_code == 0, res.output
    (prof,) = valid(out, "profile")
    assert prof["variant"] == "coarsened" and prof["params"] == {"TS": 32, "WPT": 8} and prof["arch"] == "sm_90"
    (k,) = prof["kernels"]
    assert f"{k['registers']}" in res.output and k["threads"] == 32 * 32 // 8 and 0 < k["occupancy"] <= 1
    assert prof["record"] is None and prof["position"] is None and prof["environment"]["backend"] == "cpu"


# -- devices --------------------------------------------------------------------------------------
def test_devices_without_a_gpu_lists_the_cpu(tmp_path, monkeypatch):
    def none():
        raise BackendUnavailable("PyCUDA is not installed")
    monkeypatch.setattr(runtime, "devices", none)
    out = tmp_path / "d.jsonl"
    res = CliRunner().invoke(cli, ["devices", "--json", str(out)])
    assert res.exit_code == 0, res.output
    (dev,) = valid(out, "devices")
    assert dev["backend"] == "cpu" and dev["cores"] >= 1 and dev["name"] in res.output
    res = CliRunner().invoke(cli, ["devices", "--measure"])
    assert res.exit_code == 2 and "--measure: needs a GPU" in res.output


class Nvml:
    """runtime.nvml's per-device surface, scripted: an H100 at rest with its clocks locked by a user."""

    def uuid(self):
        return "GPU-1234"

    def clock(self, which):
        return {"sm": 345.0, "mem": 2619.0}[which]

    def power_w(self):
        return 71.5

    def power_limits_w(self):
        return {"enforced": 700.0, "default": 700.0, "min": 200.0, "max": 700.0}

    def reasons(self):
        from nnbench.runtime.nvml import USER_CLOCKS
        return USER_CLOCKS | 0x1  # locked, and idle


def test_devices_json_of_a_gpu_matches_its_table(tmp_path, monkeypatch):
    h100 = DeviceInfo(name="NVIDIA H100 80GB HBM3", cc=(9, 0), sm_count=132, sm_clock_mhz=1980.0,
                      mem_clock_mhz=2619.0, bus_width_bits=5120, mem_bytes=80 * 2**30, l2_bytes=50 * 2**20)
    monkeypatch.setattr(runtime, "devices", lambda: [h100])
    monkeypatch.setitem(sys.modules, "nnbench.runtime.cuda", types.SimpleNamespace(device_nvml=lambda i: Nvml()))
    from rich.console import Console

    from nnbench.cli import app
    monkeypatch.setattr(app, "out", Console(highlight=False, width=260))  # the whole table, unsqueezed
    out = tmp_path / "d.jsonl"
    res = CliRunner().invoke(cli, ["devices", "--json", str(out)])
    assert res.exit_code == 0, res.output
    (dev,) = valid(out, "devices")
    assert dev["index"] == 0 and dev["uuid"] == "GPU-1234" and dev["cc"] == "9.0" and dev["sms"] == 132
    assert dev["clocks_locked"] is True and dev["throttle_reasons"] == "idle" and dev["power_w_now"] == 71.5
    assert dev["power_limits_w"]["enforced"] == 700.0 and dev["fp32_peak_flops"] == h100.fp32_peak_flops
    assert "locked, idle" in res.output and "700 W (200–700)" in res.output and "GPU-1234" in res.output


# -- check ----------------------------------------------------------------------------------------
def test_check_json_keeps_the_format_json_document(tmp_path):
    b = result_csv(tmp_path / "b.csv")
    out = tmp_path / "v.jsonl"
    res = CliRunner().invoke(cli, ["check", str(b), str(b), "--json", str(out)])
    assert res.exit_code == 0, res.output
    (doc,) = valid(out, "check")
    both = tmp_path / "both.jsonl"
    res = CliRunner().invoke(cli, ["check", str(b), str(b), "--format", "json", "--json", str(both)])
    printed = json.loads(res.stdout)  # stdout stays the document alone; the file's name goes to stderr
    assert {k: v for k, v in doc.items() if k != "kind"} == printed and valid(both, "check") == [doc]
    assert doc["passed"] is True and [c["verdict"] for c in doc["cases"]] == ["SAME", "SAME"]


# -- report ---------------------------------------------------------------------------------------
def test_report_json_keeps_the_selected_rows_typed_with_their_samples(tmp_path):
    a = result_csv(tmp_path / "a.csv", ("x", "y"))
    c = result_csv(tmp_path / "c.csv", ("z",), workload="conv")
    out = tmp_path / "r.jsonl"
    res = CliRunner().invoke(cli, ["report", str(a), str(c), "--workload", "gemm", "--variant", "y", "--json",
                                   str(out)])
    assert res.exit_code == 0, res.output
    (rec,) = valid(out, "results")
    assert rec["variant"] == "y" and isinstance(rec["samples"], int) and rec["cold"] is False
    back = rawresults.load(out)[0]
    src = [r for r in rawresults.load(a) if r.fields["variant"] == "y"][0]
    assert np.array_equal(back.samples_ms, src.samples_ms) and back.key == src.key


# -- never written over, bad paths, the wrong kind -------------------------------------------------
COMMANDS = {
    "profile": ["profile", "gemm", "-v", "tiled", "--backend", "cpu", "--arch", "sm_90"],
    "devices": ["devices"],
    "check": ["check", "{b}", "{b}"],
    "report": ["report", "{b}"],
}


@pytest.mark.parametrize("name", COMMANDS)
@pytest.mark.parametrize("target, message", [("taken.jsonl", "never overwrites"), ("folder", "is a directory")])
def test_json_is_never_overwritten_one_line_exit_2(tmp_path, name, target, message):
    b = result_csv(tmp_path / "b.csv")
    taken = tmp_path / "taken.jsonl"
    taken.write_text("precious\n")
    (tmp_path / "folder").mkdir()
    args = [a.replace("{b}", str(b)) for a in COMMANDS[name]] + ["--json", str(tmp_path / target)]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 2 and message in res.output, res.output
    assert len(res.output.strip().splitlines()) == 1, res.output
    assert taken.read_text() == "precious\n"


def test_a_file_of_another_kind_is_refused_by_the_gate(tmp_path):
    b = result_csv(tmp_path / "b.csv")
    verdicts = tmp_path / "v.jsonl"
    assert CliRunner().invoke(cli, ["check", str(b), str(b), "--json", str(verdicts)]).exit_code == 0
    res = CliRunner().invoke(cli, ["check", str(verdicts), str(b)])
    assert res.exit_code == 2 and "a 'check' file (nnbench check), not results" in res.output, res.output
    assert len(res.output.strip().splitlines()) == 1


def test_results_files_from_before_kinds_still_read(tmp_path):
    old = tmp_path / "old.jsonl"
    sink = rawresults.JsonSink(old)
    sink.append(dict(workload="gemm", variant="a", shape="1", status="PASS", samples_ms=[1.0, 1.1]))
    sink.close()
    head, *rest = old.read_text().splitlines()
    old.write_text("\n".join([json.dumps({k: v for k, v in json.loads(head).items() if k != "kind"}), *rest]) + "\n")
    assert [r.fields["variant"] for r in rawresults.load(old)] == ["a"]


def test_the_writer_itself_never_overwrites(tmp_path):
    """The last guard, for a file made between the command's early refusal and its write."""
    from nnbench.errors import NnbenchError
    taken = tmp_path / "taken.jsonl"
    taken.write_text("precious\n")
    with pytest.raises(NnbenchError, match="never overwrites"):
        rawresults.write_document(taken, "devices", [{"kind": "device"}])
    assert taken.read_text() == "precious\n"


def test_a_gpu_profile_line_validates_with_its_timed_record():
    """The GPU fields of a profile (timed record, roofline, ncu) without a GPU: a Profile as the H100 fills it."""
    from nnbench.profiling.profile import KernelProfile, Profile, as_json
    from nnbench.profiling.roofline import Roof, position
    v = next(x for x in workloads.variants_of("gemm") if x.name == "tiled")
    roof = Roof(51.2e12, 3.0e12)
    ms = [0.061, 0.060, 0.062]
    rec = dict(variant="tiled", params="TS=32", shape="4096×4096×4096", status="PASS", unit="launch",
               **measure.summarize(ms).as_record())
    prof = Profile("gemm", v, {"TS": 32}, "sm_90", "NVIDIA H100 80GB HBM3",
                   [KernelProfile("gemm", 1024, 32, 8192, 0, 0, 2, 1.0, "threads", (672, 2240), {"FFMA": 32})],
                   record=rec, flops=2 * 4096**3, bytes=3 * 4 * 4096**2, seconds=0.061e-3, roof=roof,
                   where=position(2 * 4096**3, 3 * 4 * 4096**2, 0.061e-3, roof), ncu={"sm__throughput": 71.2},
                   ncu_ms=0.0605)
    env = dict(backend="cuda", gpu="NVIDIA H100 80GB HBM3", git_sha="abc", timestamp="2026-11-24T00:00:00+00:00")
    line = json.loads(json.dumps(rawresults._jsonable(as_json(prof, env))))
    jsonschema.validate(line, rawresults.schema())
    timed = line["record"]
    assert timed["raw"]["ms"] == ms and timed["workload"] == "gemm" and timed["gpu"] == env["gpu"]
    assert line["position"]["bound"] == "compute" and line["roof"]["ridge"] == roof.ridge
    assert line["kernels"][0]["loop"] == [672, 2240] and line["ncu"] == {"sm__throughput": 71.2}


def test_the_schema_knows_every_kind_the_writer_writes():
    assert rawresults.schema()["$defs"]["header"]["properties"]["kind"]["enum"] == list(rawresults.KINDS)


def test_the_schema_allows_every_status_a_record_can_have():
    """REFERENCE (the CPU backend's row of a kernel config's reference) and every other status validate."""
    status = rawresults.schema()["$defs"]["record"]["properties"]["status"]["enum"]
    assert sorted(status) == sorted(results.STATUSES)


def test_soak_json_holds_every_row_with_its_seed(tmp_path):
    out = tmp_path / "s.jsonl"
    res = CliRunner().invoke(cli, ["soak", "--backend", "cpu", "--workload", "gemm", "--seed", "17", "--json",
                                   str(out)])
    assert res.exit_code == 0, res.output
    recs = valid(out, "results")
    assert len(recs) == 6 and {r["seed"] for r in recs} == {17} and {r["status"] for r in recs} == {"PASS"}
    assert all(r["provenance"] for r in recs)
