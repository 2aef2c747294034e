"""Issue 42's second campaign, kept as data: hostile inputs to kernel configs, result and history files, the CLI's
options and the Python API. Each CLI case must end in exit 2 with one `nnbench: error:` line, no traceback and no
warning before it; each API case must raise NnbenchError (never TypeError, AttributeError or IndexError, and never
quietly run). All on the CPU, in seconds: nothing here gets as far as a measurement."""

import csv
import json
import math
import shutil
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

import nnbench
from nnbench import backend_choice, paths
from nnbench.cli import cli
from nnbench.errors import NnbenchError

EXAMPLE = paths.ROOT / "examples" / "vector_add"


@pytest.fixture(autouse=True)
def _plain_user(monkeypatch, tmp_path):
    monkeypatch.delenv(backend_choice.ENV, raising=False)
    monkeypatch.delenv("NNBENCH_HISTORY_DB", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config-home"))
    monkeypatch.chdir(tmp_path)


def kernel(tmp_path: Path, edit=lambda text: text, cu: bytes | None = None) -> Path:
    """examples/vector_add copied with small problems, then `edit`ed; `cu` replaces its source."""
    folder = tmp_path / "k"
    shutil.copytree(EXAMPLE, folder, dirs_exist_ok=True)
    text = (folder / "vector_add.yaml").read_text().replace("- {N: [1000003, 16777216]}", "- {N: [100, 200]}")
    (folder / "vector_add.yaml").write_text(edit(text))
    if cu is not None:
        (folder / "vector_add.cu").write_bytes(cu)
    return folder / "vector_add.yaml"


# A result file of one row, written as nnbench writes it (a CSV and a JSON Lines file), for damaging.
@pytest.fixture(scope="module")
def good(tmp_path_factory):
    folder = tmp_path_factory.mktemp("good")
    res = CliRunner().invoke(cli, ["gemm", "--backend", "cpu", "--size", "16", "--budget", "0.01",
                                   "--csv", str(folder / "g.csv"), "--json", str(folder / "g.jsonl")])
    assert res.exit_code == 0, res.output
    return folder / "g.csv", folder / "g.jsonl"


def damaged_json(good, tmp_path, change) -> Path:
    head, first = good[1].read_text().splitlines()[:2]
    rec = json.loads(first)
    change(rec)
    out = tmp_path / "bad.jsonl"
    out.write_text(head + "\n" + json.dumps(rec) + "\n")
    return out


def damaged_csv(good, tmp_path, column, value) -> Path:
    rows = list(csv.DictReader(good[0].open()))
    rows[0][column] = value
    out = tmp_path / "bad.csv"
    with out.open("w", newline="") as f:
        w = csv.DictWriter(f, list(rows[0]))
        w.writeheader()
        w.writerow(rows[0])
    return out


def set_raw(key, value):
    return lambda r: r["raw"].update({key: value})


JSON_RECORDS = {  # damage to one JSON record -> what the one line must name
    "status a list": (lambda r: r.update(status=["PASS"]), "status"),
    "status a dict": (lambda r: r.update(status={"a": 1}), "status"),
    "status unknown": (lambda r: r.update(status="GREAT"), "status"),
    "median a list": (lambda r: r.update(median_ms=[1, 2]), "median_ms"),
    "dropped text": (set_raw("dropped", "many"), "raw.dropped"),
    "dropped infinite": (set_raw("dropped", math.inf), "raw.dropped"),
    "dropped negative": (set_raw("dropped", -3), "raw.dropped"),
    "dropped fractional": (set_raw("dropped", 1.5), "raw.dropped"),
    "ms text": (set_raw("ms", "1 2 3"), "raw.ms"),
}
CSV_CELLS = {  # a CSV cell -> what the one line must name
    "samples text": ("samples_ms", "fast fast", "samples_ms"),
    "samples half text": ("samples_ms", "0.1 0.2 x", "samples_ms"),
}
HISTORY_CELLS = {
    "sha 5000 chars": ("git_sha", "a" * 5000, "git_sha"),
    "sha with spaces": ("git_sha", "rm -rf /", "git_sha"),
    "sha markup": ("git_sha", "<script>x</script>", "git_sha"),
    "timestamp garbage": ("timestamp", "yesterday-ish", "timestamp"),
    "timestamp number": ("timestamp", "12345678901234567890", "timestamp"),
}


def one_line_error(res, *needles):
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and "Warning" not in res.output, res.output
    assert len(lines) == 1 and lines[0].startswith("nnbench: error:"), res.output
    for n in needles:
        assert n in lines[0], res.output


def invoke(*args):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning before the one line fails the case
        return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.mark.parametrize("name", list(JSON_RECORDS))
@pytest.mark.parametrize("command", ["check", "report", "history"])
def test_damaged_json_record(good, tmp_path, name, command):
    change, needle = JSON_RECORDS[name]
    bad = damaged_json(good, tmp_path, change)
    args = {"check": ["check", bad, good[1]], "report": ["report", bad, "--json", tmp_path / "r.jsonl"],
            "history": ["history", "record", bad, "--db", tmp_path / "h.sqlite"]}[command]
    one_line_error(invoke(*args), needle, "bad.jsonl:2")


@pytest.mark.parametrize("name", list(CSV_CELLS))
@pytest.mark.parametrize("command", ["check", "history"])
def test_damaged_csv_cell(good, tmp_path, name, command):
    column, value, needle = CSV_CELLS[name]
    bad = damaged_csv(good, tmp_path, column, value)
    args = {"check": ["check", bad, good[0]], "history": ["history", "record", bad, "--db", tmp_path / "h.sqlite"]}
    one_line_error(invoke(*args[command]), needle)


@pytest.mark.parametrize("name", list(HISTORY_CELLS))
def test_history_stores_no_garbage(good, tmp_path, name):
    column, value, needle = HISTORY_CELLS[name]
    bad = damaged_csv(good, tmp_path, column, value)
    db = tmp_path / "h.sqlite"
    one_line_error(invoke("history", "record", bad, "--db", db), needle, "bad.csv:2")
    assert not db.exists() or value not in db.read_bytes().decode("latin-1")


CONFIG_EDITS = {  # a kernel config's text -> (the edit, what the one line must name)
    "seed on an output": (lambda t: t.replace("output: true}", "output: true, seed: 4}"), "args.c.seed"),
    "seed on a zeros init": (lambda t: t.replace("output: true}", "init: zeros, seed: 4}"), "args.c.seed"),
    "a later problem too big": (lambda t: t.replace("- {N: [100, 200]}", "- {N: [100, 100000000000]}").replace(
        "{name: n, scalar: int32, value: N}", "{name: n, scalar: int32, value: 1}"), "problems"),
    "a fractional problem": (lambda t: t.replace("- {N: [100, 200]}", "- {N: [10.5]}"), "problems.N"),
}


@pytest.mark.parametrize("name", list(CONFIG_EDITS))
@pytest.mark.parametrize("mode", ["--dry-run", "--compile-only"])
def test_hostile_kernel_config(tmp_path, name, mode):
    edit, needle = CONFIG_EDITS[name]
    config = kernel(tmp_path, edit)
    res = invoke("sweep", config, mode, "--backend", "cpu")
    one_line_error(res, needle, "vector_add.yaml:")


@pytest.mark.parametrize("source", [b"\xff\xfe__global__ void vector_add() {}\n",
                                    b"// caf\xe9 in Latin-1\n__global__ void vector_add() {}\n"])
@pytest.mark.parametrize("mode", ["--dry-run", "--compile-only"])
def test_a_cu_that_is_not_utf8(tmp_path, source, mode):
    one_line_error(invoke("sweep", kernel(tmp_path, cu=source), mode, "--backend", "cpu"), "vector_add.cu",
                   "not UTF-8")


def gemm_sweep(tmp_path: Path, shape: str) -> Path:
    p = tmp_path / "g.yaml"
    p.write_text(f"name: g\nsuite: gemm\nshapes:\n  - {shape}\nvariants:\n  tiled:\n    axes:\n      ts: [8]\n")
    return p


CLI = {  # argv (with {tmp} for the test's folder) -> what the one line must name
    "conv stride without a layer": (["conv", "--backend", "cpu", "--stride", "1000000000"], "--stride"),
    "conv pad without a layer": (["conv", "--backend", "cpu", "--pad", "3"], "--pad"),
    "conv stride past the input": (["conv", "--backend", "cpu", "--n", "1", "--c", "1", "--h", "8", "--w", "8",
                                    "--k", "1", "--r", "3", "--stride", "1000000000"], "--stride 1000000000"),
    "conv filters past int32": (["conv", "--backend", "cpu", "--n", "1", "--c", "1000", "--h", "8", "--w", "8",
                                 "--k", "1000000", "--r", "3"], "filters"),
    "gemm device 99 on cpu": (["gemm", "--backend", "cpu", "--device", "99", "--size", "16"], "--device 99"),
    "train device 2 on cpu": (["train", "--backend", "cpu", "--device", "2"], "--device 2"),
    "history db empty": (["history", "record", "{good}", "--db", ""], "--db ''"),
    "train test per letter": (["train", "--backend", "cpu", "--test-per-letter", "1000000000"],
                              "--test-per-letter"),
    "gemm m fractional": (["gemm", "--backend", "cpu", "--m", "10.5", "--n", "16", "--k", "16"], "--m"),
}


@pytest.mark.parametrize("name", list(CLI))
def test_hostile_option(good, tmp_path, name):
    argv, needle = CLI[name]
    one_line_error(invoke(*[a.replace("{good}", str(good[0])) for a in argv]), needle)


@pytest.mark.parametrize("shape, needle", [("[46000, 46000, 46000]", "host memory"),
                                           ("[10.5, 16, 16]", "expected an integer")])
def test_every_sweep_shape_is_checked_before_a_worker(tmp_path, shape, needle):
    one_line_error(invoke("sweep", gemm_sweep(tmp_path, shape), "--dry-run", "--backend", "cpu"), needle,
                   "g.yaml:4")


def test_sweep_device_on_cpu_creates_nothing(tmp_path):
    one_line_error(invoke("sweep", kernel(tmp_path), "--backend", "cpu", "--device", "3", "--out", "o.csv"),
                   "--device 3")
    assert not (tmp_path / "o.csv").exists()


def test_report_errors_come_without_a_warning(good, tmp_path):
    one_line_error(invoke("report", good[0], "--workload", "nosuch", "--html", tmp_path / "r.html"),
                   "--workload nosuch")
    one_line_error(invoke("report", good[0], "--variant", "nosuch", "--json", tmp_path / "r.jsonl"), "--variant")


# -- the Python API ----------------------------------------------------------------------------------------------
def api_cases(config: str, good_csv: str) -> dict:
    bench = lambda **kw: lambda: nnbench.benchmark(config, backend="cpu", frame=False, **kw)  # noqa: E731
    return {
        "load an int": lambda: nnbench.load(5),
        "load a list": lambda: nnbench.load([1, 2]),
        "load None": lambda: nnbench.load(None),
        "load an empty name": lambda: nnbench.load(""),
        "benchmark an int": lambda: nnbench.benchmark(5, backend="cpu"),
        "benchmark a list": lambda: nnbench.benchmark([config], backend="cpu"),
        "problems a dict": bench(problems={"N": 5}),
        "problems a list of ints": bench(problems=[5]),
        "problems empty": bench(problems=[]),
        "problems fractional": bench(problems=[{"N": 10.5}]),
        "budget negative": bench(budget=-1),
        "budget nan": bench(budget=math.nan),
        "budget inf": bench(budget=math.inf),
        "budget text": bench(budget="1"),
        "seed negative": bench(seed=-1),
        "seed text": bench(seed="7"),
        "variants an int": bench(variants=5),
        "params a list": bench(params=[1]),
        "device 99 on cpu": bench(device=99),
        "device negative": bench(device=-1),
        "run_sweep jobs 0": lambda: nnbench.run_sweep(config, backend="cpu", jobs=0, load_only=True),
        "run_sweep jobs text": lambda: nnbench.run_sweep(config, backend="cpu", jobs="2", load_only=True),
        "run_sweep gpus text": lambda: nnbench.run_sweep(config, backend="cpu", gpus="0", load_only=True),
        "run_sweep gpus negative": lambda: nnbench.run_sweep(config, backend="cpu", gpus=[-1], load_only=True),
        "run_sweep a float": lambda: nnbench.run_sweep(3.5, backend="cpu", load_only=True),
        "run_sweep device on cpu": lambda: nnbench.run_sweep(config, backend="cpu", device=2, load_only=True),
        "check tolerance text": lambda: nnbench.check(good_csv, good_csv, tolerance="x"),
        "check tolerance negative": lambda: nnbench.check(good_csv, good_csv, tolerance=-0.1),
        "check tolerance nan": lambda: nnbench.check(good_csv, good_csv, tolerance=math.nan),
        "check empty baseline": lambda: nnbench.check([], good_csv),
        "check baseline None": lambda: nnbench.check(None, good_csv),
        "check current an int": lambda: nnbench.check(good_csv, 5),
        "check baseline of ints": lambda: nnbench.check([1, 2], good_csv),
    }


API_NAMES = list(api_cases("", ""))


@pytest.mark.parametrize("name", API_NAMES)
def test_api_misuse_is_an_nnbench_error(good, tmp_path, name):
    call = api_cases(str(kernel(tmp_path)), str(good[0]))[name]
    with pytest.raises(NnbenchError) as caught:
        call()
    assert type(caught.value) is not TypeError and "\n" not in str(caught.value)


def test_check_takes_a_percentage(good):
    """"5%" is the tolerance 0.05: the same verdicts, whatever this host's timing noise makes of them (a CPU
    run of a 16^3 GEMM can be too noisy to call SAME at 5%: UNSTABLE, which fails a gate unless allowed)."""
    def verdicts(tolerance):
        found = nnbench.check(str(good[0]), str(good[0]), tolerance=tolerance, allow_unstable=True)
        assert found.passed
        return [(v.variant, v.shape, v.verdict, v.why) for v in found.verdicts]
    from nnbench import apiargs
    assert apiargs.tolerance("check", "5%") == apiargs.tolerance("check", " 5 %") == 0.05
    assert verdicts("5%") == verdicts(0.05)
    assert verdicts(" 5 %") == verdicts(0.05)
