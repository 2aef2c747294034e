"""The kernel suite: a user's .cu file declared in YAML (nnbench/workloads/kernel/session.py), its examples, its
bad-input lines, the Python API and the pytest plugin, on this machine (nvcc, no GPU); the GPU's
share is marked `gpu`."""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from click.testing import CliRunner

import nnbench
from nnbench import paths
from nnbench.cli import app
from nnbench.errors import NnbenchError
from nnbench.sweeps import config
from tests.standins import HostArrayGpu

EXAMPLES = paths.ROOT / "examples"
VECTOR_ADD = EXAMPLES / "vector_add" / "vector_add.yaml"
TILED_GEMM = EXAMPLES / "tiled_gemm" / "tiled_gemm.yaml"
USER = Path(__file__).parent / "kernels" / "user"


def run(*args):
    """The CLI as a user meets it: its one-line errors and exit codes (NnbenchGroup.main)."""
    return CliRunner().invoke(app.cli, list(args))


def one_line_error(res, *needles: str) -> str:
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, res.output
    assert "Traceback" not in res.output
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


# -- the examples ---------------------------------------------------------------------------------
def test_examples_load_into_cases_and_problems():
    va = config.load_config(VECTOR_ADD)[0]
    assert va.workload_name == "kernel" and len(va.cases) == 14  # 5 x 3 less BLOCK * ITEMS > 2048
    assert [p.as_dict() for p in va.shapes] == [{"N": 1000003}, {"N": 16777216}]
    assert va.shapes[0].flops == 1000003 and va.shapes[0].bytes == 12 * 1000003
    gemm = config.load_config(TILED_GEMM)[0]
    assert gemm.baseline is not None and gemm.baseline.variant.name == "naive"
    assert gemm.cases[0] == gemm.baseline  # the baseline runs first, so every later row has its speedup
    assert sorted(c.param_dict.get("TS") for c in gemm.cases[1:]) == [8, 16, 32]
    big = gemm.shapes[1]
    assert big.rtol() == pytest.approx(5e-7 * 64) and big.flops == 2 * 4096**3


@pytest.mark.parametrize("cfg", [VECTOR_ADD, TILED_GEMM], ids=["vector_add", "tiled_gemm"])
def test_examples_compile_with_nvcc(cfg, tmp_path, monkeypatch):
    """CI compiles every case of both examples for the H100 (one nvcc per distinct parameter set)."""
    from nnbench.sweeps import sweep
    monkeypatch.setenv("NNBENCH_CACHE", str(tmp_path / "cache"))
    spec = config.load_config(cfg)[0]
    stats = sweep.compile_only(spec, "sm_90", jobs=2)
    assert stats.failed == 0 and stats.compiled == stats.kernels == len({c.params + (c.variant.kernel,)
                                                                           for c in spec.cases})


def test_a_broken_example_fails_to_compile(tmp_path, monkeypatch):
    """The compile check's planted defect: the same config over a .cu with a syntax error."""
    from nnbench.sweeps import sweep
    monkeypatch.setenv("NNBENCH_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "va"
    folder.mkdir()
    for f in (EXAMPLES / "vector_add").iterdir():
        if f.is_file():
            (folder / f.name).write_text(f.read_text())
    spec = config.load_config(folder / "vector_add.yaml")[0]
    (folder / "vector_add.cu").write_text((folder / "vector_add.cu").read_text().replace("c[j] = a[j] + b[j];",
                                                                                      "c[j] = a[j] + b[j]"))
    assert sweep.compile_only(spec, "sm_90", jobs=2).failed > 0


def test_vector_add_on_the_cpu_backend_checks_the_reference_and_says_so(tmp_path):
    out = tmp_path / "va.csv"
    res = run("sweep", str(VECTOR_ADD), "--backend", "cpu", "--out", str(out))
    assert res.exit_code == 0, res.output
    assert "no kernel ran" in res.output and "verified against itself" in res.output
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 28
    ran = [r for r in rows if r["status"] == "REFERENCE"]
    assert len(ran) == 2 and all("verified against itself" in r["error"] for r in ran)
    # the reference's row never poses as a kernel: its own variant, no step or parameters, no star in the table
    assert all(r["variant"] == "reference" and r["step"] == "" and r["params"] == "" for r in ran)
    assert all(float(r["rel_err"]) <= float(r["rtol"]) for r in ran)
    assert {r["status"] for r in rows} == {"REFERENCE", "SKIP"}
    assert "★" not in res.output and "REFERENCE" in res.output
    again = run("sweep", str(VECTOR_ADD), "--backend", "cpu", "--out", str(out))
    assert "ran 2 cases" in again.output and "26 resumed" in again.output  # the reference's rows run again


# -- provenance: a result outlives no edit of its kernel ----------------------------------------------
def _user_repo(tmp_path: Path) -> Path:
    """vector_add in a git repository of the user's own, with one small problem and four cases, and a header."""
    folder = tmp_path / "mine"
    folder.mkdir()
    for f in ("vector_add.cu", "reference.py"):
        (folder / f).write_text((EXAMPLES / "vector_add" / f).read_text())
    (folder / "op.cuh").write_text("#define OP(x, y) ((x) + (y))\n")
    cu = folder / "vector_add.cu"
    cu.write_text('#include "op.cuh"\n' + cu.read_text().replace("a[j] + b[j]", "OP(a[j], b[j])"))
    text = VECTOR_ADD.read_text().replace("{N: [1000003, 16777216]}", "{N: 1001}")
    (folder / "va.yaml").write_text(text.replace("[256, 64, 128, 512, 1024], ITEMS: [1, 2, 4]", "[64, 128], "
                                                                                                 "ITEMS: [1, 2]"))
    git = ["git", "-C", str(folder), "-c", "user.name=u", "-c", "user.email=u@x"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "mine"], check=True)
    return folder


def test_editing_a_kernel_or_its_header_runs_its_cases_again(tmp_path):
    """The resume key holds the source's provenance: a sweep re-run over an unchanged kernel has nothing to do, over
    an edited .cu file or header every case runs again (not "already done"); the rows name the user's commit."""
    folder = _user_repo(tmp_path)
    cfg, out = folder / "va.yaml", tmp_path / "r.csv"
    first = run("sweep", str(cfg), "--backend", "cpu", "--out", str(out))
    assert first.exit_code == 0, first.output
    rows = list(csv.DictReader(out.open()))
    head = subprocess.run(["git", "-C", str(folder), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    assert len(rows) == 4 and {r["git_sha"] for r in rows} == {head} and {r["source_repo"] for r in rows} == {
        str(folder.resolve())}
    assert len({r["provenance"] for r in rows}) == 1 and len(rows[0]["provenance"]) == 16
    again = run("sweep", str(cfg), "--backend", "cpu", "--out", str(out))
    assert "ran 1 cases" in again.output and "3 resumed" in again.output, again.output  # the reference's row only
    for f, old, new in (("vector_add.cu", "OP(a[j], b[j])", "OP(b[j], a[j])"), ("op.cuh", "(x) + (y)", "(y) + (x)")):
        (folder / f).write_text((folder / f).read_text().replace(old, new))
        edited = run("sweep", str(cfg), "--backend", "cpu", "--out", str(out))
        assert "ran 4 cases" in edited.output and "3 cases run again" in edited.output, (f, edited.output)
        rows = list(csv.DictReader(out.open()))
        assert rows[-1]["git_sha"] == head + "-dirty" and rows[-1]["provenance"] != rows[0]["provenance"]


def test_a_user_kernels_results_go_to_the_users_folder_and_old_files_run_again(tmp_path, monkeypatch):
    """Without --out, a kernel config's CSV lands in ./results/ where the command runs, not in nnbench's checkout;
    a file from before provenance was recorded still loads for the gate, and a resume of it runs its cases again
    into a new file (one line says so), or, named by --out, is refused in one line."""
    from nnbench import results, verdict
    folder = _user_repo(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    res = run("sweep", str(folder / "va.yaml"), "--backend", "cpu")
    assert res.exit_code == 0, res.output
    (made,) = (work / "results").glob("vector_add-*.csv")
    assert not list(paths.RESULTS.glob(made.name))
    rows = [dict(r, suite=r["workload"]) for r in csv.DictReader(made.open())]  # the workload under its old name
    with made.open("w", newline="") as f:  # the same file as it was written before provenance was kept
        w = csv.DictWriter(f, fieldnames=results.FIELDS_BEFORE_PROVENANCE, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    assert len(verdict.load(made)) == 4
    again = run("sweep", str(folder / "va.yaml"), "--backend", "cpu")
    assert "written before results recorded their provenance" in again.output and "ran 4 cases" in again.output
    assert len(list((work / "results").glob("vector_add-*.csv"))) == 2
    one_line_error(run("sweep", str(folder / "va.yaml"), "--backend", "cpu", "--out", str(made)), "--out",
                   "provenance")


# -- bad input: one line naming file, line and key, with what is allowed; exit 2 ---------------------
BASE = """\
name: bad
suite: kernel
source: {src}
args:
  - {{name: a, array: float32, shape: [N], init: normal}}
  - {{name: b, array: float32, shape: [N], init: uniform}}
  - {{name: c, array: float32, shape: [N], output: true}}
  - {{name: n, scalar: int32, value: N}}
variants:
  main:
    kernel: vector_add
    block: (BLOCK, 1, 1)
    grid: (cdiv(N, BLOCK), 1, 1)
    axes: {{BLOCK: [256, 128]}}
problems:
  - {{N: 1001}}
reference: {ref}
rtol: 1e-7
"""


def write(tmp_path, text: str | None = None, ref: str = "good:add", module: str | None = None, **replace) -> Path:
    text = text or BASE.format(src=EXAMPLES / "vector_add" / "vector_add.cu", ref=ref)
    for old, new in replace.items():
        old = old.replace("__", " ")
        assert old in text, old
        text = text.replace(old, new)
    (tmp_path / "good.py").write_text(module or "def add(a, b, c, n):\n    return a + b\n")
    path = tmp_path / "k.yaml"
    path.write_text(text)
    return path


def bad(tmp_path, **kw) -> str:
    return one_line_error(run("sweep", str(write(tmp_path, **kw)), "--dry-run"))


def test_the_base_config_is_good(tmp_path):
    res = run("sweep", str(write(tmp_path)), "--dry-run")
    assert res.exit_code == 0, res.output


def test_unknown_kernel_lists_what_nvcc_reports(tmp_path):
    line = bad(tmp_path, **{"kernel: vector_add": "kernel: vectoradd"})
    assert re.search(r"k\.yaml:11: variants\.main\.kernel: vector_add\.cu has no kernel 'vectoradd'; nvcc reports: "
                     r"vector_add$", line), line


def test_argument_count_mismatch(tmp_path):
    line = bad(tmp_path, **{"  - {name: n, scalar: int32, value: N}\n": ""})
    assert "k.yaml:10: variants.main.kernel: vector_add takes 4 arguments; args declares 3 (a, b, c)" in line


def test_argument_type_mismatch_against_the_ptx(tmp_path):
    line = bad(tmp_path, **{"scalar: int32": "scalar: float32"})
    assert "k.yaml:11:" in line and "argument 3 (n) is declared scalar float32" in line and ".u32" in line \
        and "allowed for it: .b32, .f32" in line
    line = bad(tmp_path, **{"{name: a, array: float32, shape: [N], init: normal}":
                            "{name: a, scalar: float32, value: 1}"})
    assert "argument 0 (a) is declared scalar float32 but vector_add's PTX takes a pointer" in line


def test_geometry_beyond_the_device_limits(tmp_path):
    line = bad(tmp_path, **{"[256, 128]": "[256, 2048]"})
    assert "k.yaml:12: variants.main.block: (BLOCK, 1, 1) is (2048, 1, 1) BLOCK=2048 at N=1001; CUDA allows " \
           "1..1,024 in x; restrict the axes" in line
    line = bad(tmp_path, **{"    axes:": "    shared: 300000\n    axes:"})
    assert "variants.main.shared: 300000 is 300,000 bytes" in line and "0..232,448" in line


def test_a_reference_that_is_missing_or_names_no_file_is_refused_at_load(tmp_path):
    line = bad(tmp_path, ref="good:missing")
    assert "k.yaml:17: reference: 'good:missing': good.py defines no 'missing' at its top level; it defines add" \
        in line
    line = bad(tmp_path, ref="nosuchmodule:f")
    assert "k.yaml:17: reference: 'nosuchmodule:f' names no file" in line
    line = bad(tmp_path, module="def add(a, b, c, n):\n    return a +\n")
    assert "good.py:2: not valid Python" in line


def _error_rows(tmp_path, **kw) -> list[str]:
    """The CPU sweep of the base config (in its worker, under the watchdog): each row's status and error."""
    out = tmp_path / "out.csv"
    res = run("sweep", str(write(tmp_path, **kw)), "--backend", "cpu", "--out", str(out))
    assert res.exit_code in (0, 1), res.output
    assert "Traceback" not in res.output
    return [f"{r['status']} {r['error']}" for r in csv.DictReader(out.open())]


@pytest.mark.parametrize("body, needle", [
    ("    raise ValueError('boom')", "k.yaml:17: reference: good:add raised ValueError: boom"),
    ("    return (a + b)[:-1]",
     "k.yaml:17: reference: good:add returned shape (1000,) for 'c'; N=1001 declares (1001,)"),
    ("    return a, b", "returned 2 arrays; the config checks 1 outputs (c)"),
    ("    import sys; sys.exit(3)", "k.yaml:17: reference: good:add raised SystemExit: 3"),
    ("    raise KeyboardInterrupt", "k.yaml:17: reference: good:add raised KeyboardInterrupt"),
    ("    return a + b\nraise SystemExit('at import')",
     "k.yaml:17: reference: good:add: loading good.py raised SystemExit: at import"),
], ids=["raises", "shape", "count", "sys.exit", "ctrl-c", "top-level"])
def test_a_reference_that_fails_is_the_cases_error_row_not_a_dead_sweep(tmp_path, body, needle):
    """The reference runs in a case (the worker), never at load: a dry run passes, and whatever it does
    other than return its outputs (SystemExit and KeyboardInterrupt included) is each case's ERROR."""
    module = "def add(a, b, c, n):\n" + body + "\n"
    assert run("sweep", str(write(tmp_path, module=module)), "--dry-run").exit_code == 0
    rows = _error_rows(tmp_path, module=module)
    assert rows and all(r.startswith("ERROR ") and needle in r for r in rows), rows


def test_a_reference_that_never_returns_is_stopped_by_the_watchdog(tmp_path):
    module = "import time\ndef add(a, b, c, n):\n    time.sleep(600)\n"
    rows = _error_rows(tmp_path, module=module, **{"rtol: 1e-7": "rtol: 1e-7\ntiming: {watchdog: 2}"})
    assert rows and all(r.startswith("ERROR ") for r in rows), rows
    assert any("watchdog" in r or "silent" in r or "hung" in r for r in rows), rows


def test_loading_a_config_runs_no_user_code(tmp_path):
    """--dry-run, --compile-only, nnbench.load() and check: the reference file is read, never run."""
    marker = tmp_path / "ran"
    module = f"open({str(marker)!r}, 'w').close()\ndef add(a, b, c, n):\n    open({str(marker)!r}, 'w').close()\n"
    cfg = write(tmp_path, module=module)
    assert run("sweep", str(cfg), "--dry-run").exit_code == 0
    assert run("sweep", str(cfg), "--compile-only", "--arch", "sm_90").exit_code == 0
    nnbench.load(cfg)
    assert not marker.exists()


@pytest.mark.parametrize("ref", ["os:system", "pickle:loads", "sys:exit", "builtins:eval", "subprocess:run",
                                 "os.path:join"])
def test_a_reference_is_never_an_importable_module(tmp_path, ref):
    """`module:function` names module.py beside the config; a module of the Python path is never imported."""
    line = bad(tmp_path, ref=ref)
    assert f"k.yaml:17: reference: {ref!r} names no file" in line, line


def test_a_module_on_the_python_path_is_not_imported(tmp_path, monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    marker = tmp_path / "imported"
    (elsewhere / "nnbench_hostile_mod.py").write_text(f"open({str(marker)!r}, 'w').close()\ndef f(*a):\n    pass\n")
    monkeypatch.syspath_prepend(str(elsewhere))
    line = bad(tmp_path, ref="nnbench_hostile_mod:f")
    assert "names no file" in line and not marker.exists() and "nnbench_hostile_mod" not in sys.modules


def test_a_reference_in_the_python_installation_is_refused(tmp_path):
    import pickle
    line = bad(tmp_path, ref=f"{pickle.__file__}:loads")
    assert "k.yaml:17: reference:" in line and "belongs to the Python installation" in line


def test_a_reference_named_by_path(tmp_path):
    (tmp_path / "refs").mkdir()
    (tmp_path / "refs" / "mine.py").write_text("def add(a, b, c, n):\n    return a + b\n")
    assert run("sweep", str(write(tmp_path, ref="refs/mine.py:add")), "--dry-run").exit_code == 0
    assert run("sweep", str(write(tmp_path, ref="./refs/mine.py:add")), "--dry-run").exit_code == 0
    rows = _error_rows(tmp_path, ref="refs/mine.py:add")
    assert any(r.startswith("REFERENCE") for r in rows), rows  # the file's reference ran (the CPU path's row)
    line = bad(tmp_path, ref="refs/mine.txt:add")
    assert "is not a .py file" in line


@pytest.mark.parametrize("old, new, needle", [
    ("rtol: 1e-7", "rtol: 1e-7\ncolour: red", "k.yaml:19: top level: unknown key 'colour'; allowed: name, workload"),
    ("array: float32, shape: [N], init: normal", "array: float33, shape: [N], init: normal",
     "k.yaml:5: args.a.array: 'float33' is not one of float16, float32"),
    ("init: uniform", "init: gaussian", "k.yaml:6: args.b.init: 'gaussian' is not one of normal, uniform, zeros"),
    ("shape: [N], output: true", "shape: [M], output: true",
     "k.yaml:7: args.c.shape: unknown name 'M'; allowed: the problem axes N"),
    ("output: true", "output: false", "k.yaml:5: args: no argument is marked `output: true`"),
    ("grid: (cdiv(N, BLOCK), 1, 1)", "grid: (cdiv(N, BLK), 1, 1)",
     "k.yaml:13: variants.main.grid: unknown name 'BLK'; grid is written over the axes and problem axes: BLOCK, N"),
    ("block: (BLOCK, 1, 1)", "block: (N, 1, 1)", "variants.main.block: unknown name 'N'"),
    ("{N: 1001}", "{N: 0}", "k.yaml:16: problems.N: 0 is below the minimum 1"),
    ("    axes: {BLOCK: [256, 128]}", "    axes: {BLOCK: [256, 100]}\n    restrict: BLOCK % 1000 == 0",
     "k.yaml:10: variants: every point was excluded; nothing to run"),
    ("rtol: 1e-7", "rtol: K * 1e-7", "k.yaml:18: rtol: unknown name 'K'; allowed: the problem axes N"),
    ("reference: good:add", "reference: good.add", "k.yaml:17: reference: 'good.add' is not module:function"),
    ("reference: good:add", "reference: _callable:x", "k.yaml:17: reference: '_callable:x': _callable names a"),
    ("source: ", "source: nowhere/", "source: 'nowhere/"),
    ("axes: {BLOCK: [256, 128]}", "axes: {block: [256]}", "variants.main.axes: 'block' is not a macro name"),
])
def test_config_mistakes(tmp_path, old, new, needle):
    text = BASE.format(src=EXAMPLES / "vector_add" / "vector_add.cu", ref="good:add").replace(old, new, 1)
    line = one_line_error(run("sweep", str(write(tmp_path, text=text)), "--dry-run"))
    assert needle in line, line


def test_the_loader_raises_nnbench_error_for_the_api(tmp_path):
    with pytest.raises(NnbenchError, match="has no kernel 'nope'"):
        nnbench.load(write(tmp_path, **{"kernel: vector_add": "kernel: nope"}))


# -- the Python API ---------------------------------------------------------------------------------
def test_benchmark_on_the_cpu_path_with_params_and_problems():
    df = nnbench.benchmark(VECTOR_ADD, backend="cpu", params={"BLOCK": 128, "ITEMS": 2}, problems=[{"N": 4097}],
                           budget=0.05)
    assert list(df["status"]) == ["REFERENCE"] and list(df["variant"]) == ["reference"] and df["shape"][0] == "N=4097"
    assert "BLOCK=128 ITEMS=2" in df["error"][0] and df.attrs["backend"] == "cpu" and list(df["backend"]) == ["cpu"]
    assert df["rel_err"][0] <= 1e-7 and df["median_ms"][0] > 0 and df["gflops"][0] > 0


def test_benchmark_from_keywords_with_a_callable_reference():
    rows = nnbench.benchmark(
        source=str(EXAMPLES / "vector_add" / "vector_add.cu"), kernel="vector_add", backend="cpu", frame=False,
        args=[{"name": "a", "array": "float32", "shape": ["N"]}, {"name": "b", "array": "float32", "shape": ["N"]},
              {"name": "c", "array": "float32", "shape": ["N"], "output": True},
              {"name": "n", "scalar": "int32", "value": "N"}],
        grid="(cdiv(N, BLOCK),)", block="(BLOCK,)", params={"BLOCK": 128}, problems=[{"N": 999}],
        reference=lambda a, b, c, n: a + b, rtol="1e-7", timing={"budget": 0.05})
    assert [r["status"] for r in rows] == ["REFERENCE"] and "BLOCK=128" in rows[0]["error"]
    with pytest.raises(NnbenchError, match="nvcc reports: vector_add"):
        nnbench.benchmark(source=str(EXAMPLES / "vector_add" / "vector_add.cu"), kernel="vadd", backend="cpu",
                          args=[{"name": "c", "array": "float32", "shape": ["N"], "output": True}],
                          grid="(1,)", block="(1,)", problems=[{"N": 9}], reference=lambda c: c)


def _doctored(src: Path, dst: Path, factor: float) -> Path:
    """A copy of a result CSV with every median (and its quartiles) scaled: a planted slowdown. The raw
    samples (which the gate tests) are scaled alike, each pulled to 1% of its distance from the median."""
    rows = list(csv.DictReader(src.open()))
    for r in rows:
        if r.get("samples_ms") and r["median_ms"]:
            med = float(r["median_ms"])
            quiet = (factor * (med + 0.01 * (float(x) - med)) for x in r["samples_ms"].split())
            r["samples_ms"] = " ".join(f"{x:.6g}" for x in quiet)
        for k in ("median_ms", "q1_ms", "q3_ms"):
            if r[k]:
                r[k] = str(float(r[k]) * factor)
        if r["iqr_ms"]:
            r["iqr_ms"] = str(float(r["iqr_ms"]) * 0.01)  # a quiet run: the change is not noise
    with dst.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return dst


def test_check_passes_the_same_file_and_fails_a_planted_slowdown(tmp_path):
    out = tmp_path / "base.csv"
    nnbench.run_sweep(VECTOR_ADD, backend="cpu", out=out)
    # a file against itself is never SLOWER; on a noisy CPU run it may be UNSTABLE (too noisy to say SAME)
    itself = nnbench.check(out, out, allow_unstable=True)
    assert itself.passed and {v.verdict for v in itself.verdicts} <= {"SAME", "UNSTABLE", "SKIPPED"}
    quiet = _doctored(out, tmp_path / "quiet.csv", 1.0)
    slow = _doctored(out, tmp_path / "slow.csv", 1.10)
    gate = nnbench.check(quiet, slow, tolerance=0.05)
    assert not gate.passed and {v.verdict for v in gate.failures} == {"SLOWER"}
    assert nnbench.check(quiet, slow, tolerance=0.20).passed


# -- the pytest plugin ----------------------------------------------------------------------------
PLUGIN_TEST = f"""
def test_vector_add(nnbench_kernel):
    [rec] = nnbench_kernel({str(VECTOR_ADD)!r}, params={{"BLOCK": 256, "ITEMS": 1}}, problems=[{{"N": 100003}}],
                           budget=0.05)
    assert rec["status"] in ("PASS", "REFERENCE")  # REFERENCE: the CPU path, where the reference ran
"""


def pytester_run(tmp_path, *args, env=None, source=PLUGIN_TEST):
    test = tmp_path / "test_user_kernel.py"
    test.write_text(source)
    installed = any(ep.value == "nnbench.pytest_plugin" for ep in entry_points(group="pytest11"))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", str(test),
           "--rootdir", str(tmp_path), *args]
    if not installed:
        cmd[3:3] = ["-p", "nnbench.pytest_plugin"]
    # The checkout first, and whatever the caller's path already holds (PyCUDA may live there).
    e = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(paths.ROOT), os.environ.get("PYTHONPATH")])),
             **(env or {}))
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env=e, timeout=300)


def test_the_plugin_is_registered_in_pyproject():
    text = (paths.ROOT / "pyproject.toml").read_text()
    assert '[project.entry-points.pytest11]\nnnbench = "nnbench.pytest_plugin"' in text


def test_the_plugin_skips_without_a_gpu_with_the_reason(tmp_path):
    from tests.conftest import gpu_available
    if gpu_available():
        pytest.skip("this machine has a GPU: the plugin test runs instead of skipping")
    p = pytester_run(tmp_path, "-rs")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "1 skipped" in p.stdout and "nnbench: no GPU backend" in p.stdout


def test_the_plugin_saves_and_gates_on_the_cpu_path(tmp_path):
    base = tmp_path / "base.csv"
    p = pytester_run(tmp_path, "--nnbench-backend", "cpu", f"--nnbench-save={base}")
    assert p.returncode == 0 and "1 passed" in p.stdout, p.stdout + p.stderr
    assert "1 record saved to" in p.stdout and base.exists()
    # The baseline ten times as fast: a regression that the second run's own noise cannot hide. At twice as fast,
    # a first run slowed by a loaded 2-core CI host left the second within 5% of the doctored baseline (UNSTABLE).
    quiet = _doctored(base, tmp_path / "quiet.csv", 0.1)
    p = pytester_run(tmp_path, "--nnbench-backend", "cpu", f"--nnbench-save={tmp_path / 'cur.csv'}",
                     f"--nnbench-compare={quiet}", "--nnbench-fail=median:5%")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "SLOWER" in p.stdout and "nnbench gate against" in p.stdout and "FAILED" in p.stdout
    p = pytester_run(tmp_path, "--nnbench-backend", "cpu", "--nnbench-fail=mean:5")
    assert p.returncode == 4 and "--nnbench-fail mean:5: expected median:N%" in p.stderr


# -- devices --------------------------------------------------------------------------------------
def test_device_option_on_every_gpu_command():
    for cmd in ("gemm", "train", "conv", "sweep", "profile", "check"):
        res = run(cmd, "--help")
        assert re.search(r"^\s+--device INTEGER RANGE\s", res.output, re.M), cmd


def test_records_carry_the_device_index_and_uuid():
    from nnbench import results
    assert {"device_index", "gpu_uuid"} <= set(results.ENVIRONMENT)


def test_a_device_that_does_not_exist_is_one_line(monkeypatch):
    from nnbench.errors import BackendUnavailable
    from nnbench.runtime import open_backend
    with pytest.raises(BackendUnavailable):
        open_backend("cuda:7")


# -- on the GPU (the lead runs these) ---------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("cfg", [VECTOR_ADD, TILED_GEMM], ids=["vector_add", "tiled_gemm"])
def test_examples_verify_on_the_gpu(cfg, tmp_path):
    out = tmp_path / "r.csv"
    res = run("sweep", str(cfg), "--out", str(out))
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader(out.open()))
    assert rows and all(r["status"] == "PASS" for r in rows), [(r["variant"], r["error"]) for r in rows]
    assert all(r["device_index"] == "0" and r["gpu_uuid"].startswith("GPU-") for r in rows)
    assert all(r["timing"] != "host" and float(r["rel_err"]) <= float(r["rtol"]) for r in rows)


@pytest.mark.gpu
def test_a_kernel_that_faults_or_hangs_is_an_error_row_and_the_sweep_goes_on(tmp_path):
    out = tmp_path / "r.csv"
    res = run("sweep", str(USER / "faults.yaml"), "--out", str(out))
    assert res.exit_code == 1, res.output
    rows = {r["variant"]: r for r in csv.DictReader(out.open())}
    assert rows["wild"]["status"] == "ERROR" and "fault" in rows["wild"]["error"]
    assert rows["spin"]["status"] == "ERROR" and "watchdog" in rows["spin"]["error"]
    assert rows["chain"]["status"] == "PASS"


@pytest.mark.gpu
def test_the_baseline_kernel_as_the_reference(tmp_path):
    text = TILED_GEMM.read_text().replace("reference: reference:gemm\n", "")
    cfg = tmp_path / "g.yaml"
    cfg.write_text(text.replace("source: tiled_gemm.cu", f"source: {EXAMPLES / 'tiled_gemm' / 'tiled_gemm.cu'}"))
    df = nnbench.benchmark(cfg, backend="cuda", problems=[{"M": 257, "N": 129, "K": 300}], budget=0.05)
    assert set(df["status"]) == {"PASS"} and len(df) == 4


@pytest.mark.gpu
def test_the_plugin_catches_a_planted_slowdown(tmp_path):
    """Baseline unchanged, then the same kernel with 10% more FMAs (NNBENCH_PLANT) must fail the gate;
    an unchanged kernel must pass it. The lead repeats this 10 times on the H100."""
    global PLUGIN_TEST
    saved = PLUGIN_TEST
    PLUGIN_TEST = f"""
def test_chain(nnbench_kernel):
    nnbench_kernel({str(USER / 'fma_chain.yaml')!r})
"""
    try:
        base = tmp_path / "base.csv"
        first = pytester_run(tmp_path, f"--nnbench-save={base}")
        assert first.returncode == 0 and base.is_file(), first.stdout + first.stderr  # it ran, not skipped
        same = pytester_run(tmp_path, f"--nnbench-save={tmp_path / 'same.csv'}", f"--nnbench-compare={base}",
                            "--nnbench-fail=median:5%")
        assert same.returncode == 0, same.stdout
        slow = pytester_run(tmp_path, f"--nnbench-save={tmp_path / 'slow.csv'}", f"--nnbench-compare={base}",
                            "--nnbench-fail=median:5%", env={"NNBENCH_PLANT": "PLANT_SLOWDOWN=1"})
        assert slow.returncode == 1 and "SLOWER" in slow.stdout, slow.stdout
    finally:
        PLUGIN_TEST = saved


def test_the_readme_walkthrough_config_loads(tmp_path):
    """The YAML the README shows is a working config (beside the example's .cu and reference)."""
    text = (paths.ROOT / "README.md").read_text().split("**3. The config**", 1)[1]
    block = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    for f in ("vector_add.cu", "reference.py"):
        (tmp_path / f).write_text((EXAMPLES / "vector_add" / f).read_text())
    (tmp_path / "walk.yaml").write_text(block)
    spec = config.load_config(tmp_path / "walk.yaml")[0]
    assert len(spec.cases) == 14 and len(spec.shapes) == 2


# -- the session's GPU path on a stand-in device ------------------------------------------------------
class _StandInGpu(HostArrayGpu):
    """The seam over host arrays (tests/standins.py) with a 'kernel' that does what vector_add.cu does (or,
    planted, leaves the last element unwritten): the session's GPU logic (buffers, argument packing, NaN
    poisoning, verification, reset) runs here as it will on the H100."""

    def __init__(self, skip_last: bool = False) -> None:
        super().__init__()
        self.skip_last = skip_last
        self.launches: list[tuple] = []

    def bind(self, kernel, grid, block, args, signature=None, *, smem=0, stream=None):
        self.launches.append((kernel.name, grid, block, signature, len(args)))
        a, b, c = (self.buffers[p] for p in args[:3])
        n = int(args[3])

        def launch():
            end = n - 1 if self.skip_last else n
            c[:end] = a[:end] + b[:end]
        return launch


@pytest.mark.parametrize("skip_last, status", [(False, "PASS"), (True, "FAIL")], ids=["writes all", "planted"])
def test_the_gpu_path_poisons_verifies_and_times(skip_last, status):
    from nnbench import measure
    from nnbench.workloads.kernel.session import WORKLOAD, KernelProblem
    spec = config.load_config(VECTOR_ADD)[0]
    case = next(c for c in spec.cases if c.param_dict == {"BLOCK": 128, "ITEMS": 2})
    problem = KernelProblem((("N", 1001),), spec.shapes[0].spec)
    gpu = _StandInGpu(skip_last)
    session = WORKLOAD.session(gpu, measure.TimingSettings(budget_s=0.01, min_samples=3), 1e-7, 0, {})
    rec = session.run_case(case, problem, compiled=object())
    assert rec["status"] == status, rec
    assert gpu.launches[0] == ("vector_add", (4, 1, 1), (128, 1, 1), "PPPi", 4)  # cdiv(1001, 128 * 2)
    if skip_last:  # the unwritten element stayed NaN: the error is not finite
        assert rec["rel_err"] == float("inf")
    else:
        assert rec["rel_err"] <= 1e-7 and rec["median_ms"] == 0.01 and rec["timing"] == "hot-batched"


def _with_npy(tmp_path, data: bytes | None = None, array=None, problems: str = "{N: 1001}") -> str:
    import numpy as np
    if array is not None:
        np.save(tmp_path / "a.npy", array, allow_pickle=True)
    else:
        (tmp_path / "a.npy").write_bytes(data)
    return bad(tmp_path, **{"init: normal": "init: {npy: a.npy}", "{N: 1001}": problems})


def test_an_object_array_npy_is_refused_at_load_without_unpickling(tmp_path):
    import numpy as np
    line = _with_npy(tmp_path, array=np.array([object()] * 1001, dtype=object))
    assert "k.yaml:5: args.a.init:" in line and "a.npy: holds object elements" in line and "unpickled" in line


@pytest.mark.parametrize("data", [b"", b"\x93NUMPY\x01\x00garbage", b"not an npy file at all" * 10],
                         ids=["empty", "bad-header", "text"])
def test_a_corrupt_npy_is_one_line(tmp_path, data):
    line = _with_npy(tmp_path, data=data)
    assert "k.yaml:5: args.a.init:" in line and "not a readable .npy file" in line


def test_every_problem_is_checked_against_an_npy_shape(tmp_path):
    """Not only the smallest: the second problem needs another shape than the file holds."""
    import numpy as np
    line = _with_npy(tmp_path, array=np.zeros(1001, np.float32), problems="{N: [1001, 2002]}")
    assert "k.yaml:5: args.a.init:" in line and "holds shape (1001,); the problem N=2002 needs (2002,)" in line


def test_pickle_loads_on_a_pickled_npy_runs_nothing(tmp_path):
    """The reproduction: a float64 .npy whose bytes are a pickle, and `reference: pickle:loads`."""
    import pickle
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))
    line = _with_npy(tmp_path, data=pickle.dumps(Payload()), **{})
    assert "not a readable .npy file" in line and not marker.exists()
    (tmp_path / "a.npy").unlink()
    line = bad(tmp_path, ref="pickle:loads")
    assert "k.yaml:17: reference: 'pickle:loads' names no file" in line and not marker.exists()


def test_a_scalar_that_overflows_its_dtype_is_one_line(tmp_path):
    line = bad(tmp_path, **{"value: N}": "value: N * 10**7}"})
    assert "k.yaml:8: args.n.value: N * 10**7 is 10010000000 BLOCK=256 at N=1001; a int32 holds " \
           "-2,147,483,648..2,147,483,647" in line


@pytest.mark.parametrize("old, new, needle", [
    ("rtol: 1e-7", "rtol: (N - 5000) ** 0.5", "k.yaml:18: rtol: expression '(N - 5000) ** 0.5': a complex number"),
    ("rtol: 1e-7", "rtol: 1e-7\nflops: (N - 5000) ** 0.5", "k.yaml:19: flops:"),
    ("{N: 1001}", "{N: [" + ", ".join(str(i) for i in range(1, 101)) + "], M: [" + ", ".join(
        str(i) for i in range(1, 101)) + "], K: [1, 2]}", "k.yaml:16: problems: 100 N × 100 M × 2 K make 20,000 "
                                                         "problems; at most 10,000 are allowed"),
])
def test_unbounded_or_complex_values_in_a_kernel_config(tmp_path, old, new, needle):
    text = BASE.format(src=EXAMPLES / "vector_add" / "vector_add.cu", ref="good:add").replace(old, new, 1)
    assert needle in one_line_error(run("sweep", str(write(tmp_path, text=text)), "--dry-run"))
