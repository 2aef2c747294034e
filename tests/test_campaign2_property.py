"""Property-based bad input on issue 42's surfaces (hypothesis): generated kernel configs, Python API calls and history
records, each a valid one with one part replaced by a generated value.

The property, for every example: the CLI exits 0 or 2, and on 2 prints exactly one `nnbench: error:` line with no
traceback; the API returns or raises NnbenchError with a one-line message (never TypeError, AttributeError, a
RecursionError ...); nothing outside the test's own temporary folder is created or changed (the repository's
results/, configs/ and examples/ included). Bounded (max_examples, no deadline, derandomized, so every run draws the
same examples) to well under 30 s on two cores. nvcc is stubbed with the entry the example's .cu really has
(`vector_add`, three pointers and an int), so CI without CUDA draws the same examples.
"""

import csv
import json
import math
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

import nnbench
from nnbench import backend_choice, paths
from nnbench.cli import cli
from nnbench.errors import NnbenchError
from nnbench.workloads.kernel import session
from tests import test_campaign2
from tests.test_badinput_property import mutate

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

BOUNDED = settings(max_examples=50, deadline=None, derandomize=True, database=None,
                   suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
EXAMPLE = paths.ROOT / "examples" / "vector_add"
VECTOR_ADD_PTX = {"vector_add": ["u64", "u64", "u64", "u32"]}  # what nvcc -ptx emits for examples/vector_add


@pytest.fixture(autouse=True)
def _sandbox(monkeypatch, tmp_path):
    monkeypatch.delenv(backend_choice.ENV, raising=False)
    monkeypatch.delenv("NNBENCH_HISTORY_DB", raising=False)
    for var, sub in (("XDG_CONFIG_HOME", "config"), ("XDG_CACHE_HOME", "cache"), ("NNBENCH_CACHE", "cubin")):
        monkeypatch.setenv(var, str(tmp_path / sub))
    monkeypatch.setattr(session, "ptx_entries", lambda *a, **k: VECTOR_ADD_PTX)
    monkeypatch.chdir(tmp_path)


def repository() -> dict[str, tuple[int, int]]:
    """(size, mtime) of every file of the checkout but git's and caches: what a refused input must leave alone."""
    out = {}
    for root, dirs, files in os.walk(paths.ROOT):
        dirs[:] = [d for d in dirs if d not in (".git", "__pycache__", ".pytest_cache", ".ruff_cache", ".hypothesis")]
        for f in files:
            st_ = os.stat(os.path.join(root, f))
            out[os.path.join(root, f)] = (st_.st_size, st_.st_mtime_ns)
    return out


def one_line_or_ok(res, label):
    assert res.exception is None or isinstance(res.exception, SystemExit), (label, repr(res.exception), res.output)
    assert res.exit_code in (0, 2), (label, res.exit_code, res.output)
    assert "Traceback" not in res.output, (label, res.output)
    if res.exit_code == 2:
        lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("nnbench: error:"), (label, res.stderr)


# Values a careless or hostile author writes: every YAML type, the special floats, huge and negative numbers,
# expressions that try Python, names of functions and modules, paths that leave the folder.
LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=10),
    st.sampled_from(["N", "N / 3", "-N", "N * 2**40", "(N,) * 10**9", "__import__('os').system('id')", "N.real",
                     "cdiv(N, 0)", "9**9**9", "(BLOCK, 1, 1, 1)", "(BLOCK, 2, 1)", "(0, 1, 1)", "os:system",
                     "pickle:loads", "reference:vector_add", "reference:nosuch", "../../etc/passwd", "/dev/zero",
                     "vector_add.cu", "float32", "float128", "int32", "zeros", "npy", "sm_90", "random", "1e-7"]))
VALUES = st.recursive(LEAVES, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                      st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                      max_leaves=6)


def base_kernel() -> dict:
    cfg = yaml.safe_load((EXAMPLE / "vector_add.yaml").read_text())
    cfg["problems"] = [{"N": [100, 200]}]
    return cfg


SPOTS = [("name",), ("suite",), ("description",), ("source",), ("include",), ("args",), ("args", 0),
         ("args", 0, "shape"), ("args", 0, "init"), ("args", 1, "seed"), ("args", 2, "output"), ("args", 3, "value"),
         ("args", 3, "scalar"), ("args", 0, "array"), ("variants",), ("variants", "vector_add"),
         ("variants", "vector_add", "kernel"), ("variants", "vector_add", "block"), ("variants", "vector_add", "grid"),
         ("variants", "vector_add", "shared"), ("variants", "vector_add", "axes"),
         ("variants", "vector_add", "axes", "BLOCK"), ("variants", "vector_add", "restrict"), ("problems",),
         ("problems", 0), ("problems", 0, "N"), ("flops",), ("bytes",), ("reference",), ("baseline",), ("rtol",),
         ("precision",), ("seed",), ("timing",), ("timing", "budget"), ("arch",), ("strategy",), ("budget",),
         ("bogus",)]
# Text that YAML itself turns hostile: tags that would construct objects, aliases, merge keys, tabs, a BOM, NUL.
RAW = st.sampled_from(["!!python/object/apply:os.system [id]", "!!binary aGVsbG8=", "!local x", "&a [1, 2]",
                       "*nosuch", "{<<: {a: 1}}", "\tN", "\ufeffN", "N\x00", "[[[[[[[[", "{[a]: b}", "'unclosed"])


@BOUNDED
@given(spot=st.sampled_from(SPOTS), value=VALUES, raw=st.one_of(st.none(), RAW))
# The campaign's findings, drawn every run whatever the generator draws: a list as a key, an empty problem axis
@example(spot=("variants", "vector_add", "axes"), value=None, raw="{[a]: b}")
@example(spot=("problems", 0, "N"), value=[], raw=None)
def test_generated_kernel_configs_load_or_give_one_line(tmp_path, spot, value, raw):
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    shutil.copytree(EXAMPLE, folder, dirs_exist_ok=True)
    config = folder / "vector_add.yaml"
    text = yaml.safe_dump(mutate(spot, "RAW" if raw is not None else value, base_kernel()), allow_unicode=True)
    config.write_text(text.replace("RAW", raw) if raw is not None else text)
    before = repository()
    res = CliRunner().invoke(cli, ["sweep", str(config), "--dry-run", "--backend", "cpu"])
    one_line_or_ok(res, (spot, value, raw))
    if res.exit_code == 2:
        assert "vector_add.yaml" in res.stderr or "vector_add.cu" in res.stderr, res.stderr
    assert repository() == before


# -- the Python API ---------------------------------------------------------------------------------------------
ARGUMENTS = st.one_of(VALUES, st.sampled_from([b"bytes", print, object(), Path("/dev/zero"), Path("/"), 10**30,
                                               -0.0, math.nan, "5%", "200%", [[{"N": 10**15}]]]))


def api_call(name, config, good_csv, value):
    """One call of the API with `name` set to `value` and every other argument valid (and cheap)."""
    if name.startswith("check."):
        kw = {"baseline": good_csv, "current": good_csv, "tolerance": 0.05}
        kw[name.split(".")[1]] = value
        return lambda: nnbench.check(**kw)
    if name == "load":
        return lambda: nnbench.load(value)
    kw = {"backend": "cpu", "frame": False, "budget": 0.001, "problems": [{"N": 64}]}
    if name.split(".")[1] == "budget" and isinstance(value, int | float) and not isinstance(value, bool):
        value = min(value, 0.01) if value == value else value  # a valid budget stays cheap
    kw[name.split(".")[1]] = value
    return lambda: nnbench.benchmark(config, **kw)


API_SPOTS = ["load", "check.baseline", "check.current", "check.tolerance", "check.allow_missing", "check.any_gpu",
             "benchmark.backend", "benchmark.device", "benchmark.variants", "benchmark.params", "benchmark.problems",
             "benchmark.budget", "benchmark.seed", "benchmark.frame", "benchmark.source", "benchmark.config"]


good = test_campaign2.good  # one result file written by gemm on the CPU (a CSV and its JSON Lines twin)


@pytest.fixture
def good_csv(good):
    return good[0]


def nested(depth: int) -> dict:
    out: dict = {}
    for _ in range(depth):
        out = {"suite": out}
    return out


@BOUNDED
@given(name=st.sampled_from(API_SPOTS), value=ARGUMENTS)
@example(name="benchmark.backend", value=1)  # AttributeError at 491edfa
@example(name="load", value=nested(60))  # past apiargs.plain's depth (3000 levels was a RecursionError)
@example(name="benchmark.problems", value=[{"N": 10**15}])  # a 7 PiB allocation
def test_generated_api_calls_return_or_raise_nnbench_error(tmp_path, good_csv, name, value):
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    shutil.copytree(EXAMPLE, folder, dirs_exist_ok=True)
    config = str(folder / "vector_add.yaml")
    if name == "benchmark.config":
        call = lambda: nnbench.benchmark(value, backend="cpu", frame=False, budget=0.001)  # noqa: E731
    else:
        call = api_call(name, config, str(good_csv), value)
    before = repository()
    try:
        call()
    except NnbenchError as e:
        assert "\n" not in str(e).strip(), (name, value, str(e))
    assert repository() == before


# -- history records --------------------------------------------------------------------------------------------
CELLS = st.one_of(st.text(max_size=12), st.sampled_from(["nan", "inf", "-1", "1e308", "0", "", "=1+1", "PASS", "FAIL",
                                                         "True", "a" * 300, "1 2 3", "-0.5 x", "2026-13-45"]),
                  st.integers(min_value=-2**65, max_value=2**65).map(str), st.floats().map(repr))
JSON_VALUES = st.one_of(VALUES, st.sampled_from([math.nan, math.inf, -math.inf, True, 10**30]))


@BOUNDED
@given(fields=st.lists(st.sampled_from(["suite", "variant", "params", "shape", "status", "median_ms", "iqr_ms",
                                        "samples", "reps", "samples_ms", "git_sha", "timestamp", "gpu", "backend",
                                        "dropped", "cold", "step", "seed"]), min_size=1, max_size=3, unique=True),
       cells=st.lists(CELLS, min_size=3, max_size=3), json_values=st.lists(JSON_VALUES, min_size=3, max_size=3),
       as_json=st.booleans())
@example(fields=["dropped"], cells=["some", "", ""], json_values=[0, 0, 0], as_json=False)  # ValueError at 491edfa
@example(fields=["batch"], cells=["1e400", "", ""], json_values=[0, 0, 0], as_json=False)
def test_generated_history_records_store_or_give_one_line(tmp_path, good_csv, fields, cells, json_values, as_json):
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    if as_json:
        head, first = good_csv.with_suffix(".jsonl").read_text().splitlines()[:2]
        rec = json.loads(first)
        rec.update(zip(fields, json_values))
        source = folder / "r.jsonl"
        source.write_text(head + "\n" + json.dumps(rec) + "\n")
    else:
        row = next(csv.DictReader(good_csv.open()))
        row.update(zip(fields, cells))
        source = folder / "r.csv"
        with source.open("w", newline="") as f:
            w = csv.DictWriter(f, list(row))
            w.writeheader()
            w.writerow(row)
    db = folder / "h.sqlite"
    before = repository()
    res = CliRunner().invoke(cli, ["history", "record", str(source), "--db", str(db)])
    one_line_or_ok(res, (fields, cells if not as_json else json_values))
    if res.exit_code == 0:
        one_line_or_ok(CliRunner().invoke(cli, ["history", "show", "--db", str(db), "--no-png"]), "show")
    assert repository() == before
