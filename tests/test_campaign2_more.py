"""Issue 42's second campaign, continued (tests/test_campaign2.py holds its first 95 cases): more hostile inputs,
written from scratch, kept as data. The surfaces: kernel configs (keys, types, expressions, problems, references,
paths, symlinks, special files, YAML tags, anchors, encodings), sweep configs, result CSV and JSON files fed to check,
report and history, history databases, the options of every command, the Python API, and where reports go.

Each case names its expected class: REFUSED (exit 2, one `nnbench: error:` line naming the option, or the file, line
and key, with no traceback and no warning before it), NnbenchError from the API, INVALID (check's verdict on a case
whose median is damaged: exit 1, said in the table, as tests/test_harden.py has it), or ACCEPTED where the input is
valid after all (a BOM, CRLF line ends, an alias that only repeats a value: 12 controls). Nothing here measures on a
GPU; the file runs in about 20 s on two cores. A case that blocks fails as a hang after HANG_S seconds.

Count: 403 table entries (391 hostile inputs, 12 valid controls), 549 runs once the result files go to four commands,
the history databases to two, the files beside a config to two modes and the report paths to three flags. With the
first 95, the second campaign has 486 hostile inputs.

At 491edfa, before the fixes of this branch, 113 of the 549 runs failed:
- 88 silent acceptances: damaged result cells (negative or NaN sample times, fractional counts, empty names, a column
  twice, cells past the header, no status or median column) recorded by history, reported, or passed by check as
  SAME; fractional shapes, scalars and shared memory truncated; a fourth launch dimension dropped; negative flops;
  a variant axis that shadows a problem axis; a seed past 32 bits; YAML tags (!expr, !!python/...) read as plain
  text; options that do nothing without their partner (report --tolerance without --baseline, profile --problem
  without --config, soak --seeds with --seed, history --png with --no-png, sweep --gpus 0 under --dry-run); API
  flags given as text and a seed past 32 bits;
- 17 tracebacks: a list as a YAML key, an empty problem axis, a symlink loop as the .cu, text or infinity in the
  dropped and batch cells, NaN samples in report --json, cells past the header in history; API: a callable as a
  path, a 3,000-level dict, backend=1, json=5, events=5;
- 3 unbounded runs: a config or an API config path that is /dev/zero (read until memory ran out), and an API problem
  of 10^15 elements allocated unestimated;
- 2 hangs: a config that is a FIFO (open waits forever), 100,001 API problems run one by one;
- 3 incomplete lines: history show --png /dev/full printed its table before the error; history without a status column
  and report --json on a taken name named neither the column nor --force.
No case ran code from data (a reference.py beside the config is never imported by --dry-run or --compile-only, and a
!!python tag never constructs anything) and none lost a record.

Spreadsheet formulas: nnbench does not rewrite cells of the result CSVs it writes (they are data it reads back, where
`-0.5` must stay a number). Instead no text a config gives reaches a cell unchecked: sweep, variant and axis names are
restricted to letters, digits, `_`, `-` and `.`, so no cell can hold a formula that calls anything (=, +, @, a pipe or
parentheses), and a name written as a formula is refused (test_a_formula_cell_cannot_run_in_a_spreadsheet). check
--format junit escapes hostile cells (test_junit_and_markdown_escape_hostile_cells), and HTML reports escape every
value (tests/test_hostile_report.py).
"""

import csv
import math
import os
import re
import signal
import stat
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest

import nnbench
from nnbench import paths, rawresults
from nnbench.errors import NnbenchError
from tests import test_campaign2 as first
from tests.test_campaign2 import damaged_csv, damaged_json, invoke, kernel

# The first campaign's fixtures: a plain user (no backend in the environment, a config home of the test's own) and
# one good result file written by gemm, for damaging.
_plain_user, good = first._plain_user, first.good

ACCEPTED = None  # a case whose input is valid: exit 0
INVALID = "INVALID"  # the gate's verdict on a case it cannot compare (a damaged median): exit 1, said in the table
HANG_S = 20  # no case takes a second; one that blocks (a FIFO opened for reading) fails as a hang, not a stuck CI


class Hang(Exception):
    pass


@pytest.fixture(autouse=True)
def _no_hang():
    def hung(signum, frame):
        raise Hang(f"no answer in {HANG_S} s")
    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(HANG_S)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def outcome(res, needles):
    """The case's class, asserted: ACCEPTED (needles is None) or REFUSED with every needle on the one line."""
    assert "Traceback" not in res.output, res.output
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise AssertionError(f"unexpected {type(res.exception).__name__}: {res.exception}\n{res.output}")
    if needles is ACCEPTED:
        assert res.exit_code == 0, res.output
        return
    if needles is INVALID:
        assert res.exit_code == 1 and "INVALID" in res.output and "regression gate: FAILED" in res.output, res.output
        return
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 2, res.output
    assert "Warning" not in res.output, res.output
    assert len(lines) == 1 and lines[0].startswith("nnbench: error:"), res.output
    for n in needles if isinstance(needles, tuple) else (needles,):
        assert n in lines[0], (n, res.output)


def sub(*pairs):
    """An edit of the config's text: each `old` must be there (so that no case silently tests the unchanged file)."""
    def edit(text):
        for old, new in zip(pairs[::2], pairs[1::2]):
            assert old in text, old
            text = text.replace(old, new, 1)
        return text
    return edit


ARG_A = "{name: a, array: float32, shape: [N], init: {normal: [0, 1]}}"
ARG_B_SEED = "init: {uniform: [-1, 1]}, seed: 1}"
ARG_C = "{name: c, array: float32, shape: [N], output: true}"
ARG_N = "{name: n, scalar: int32, value: N}"
AXES = "axes: {BLOCK: [256, 64, 128, 512, 1024], ITEMS: [1, 2, 4]}"
PROBLEMS = "- {N: [100, 200]}"


def a_with(**kw) -> str:
    return ARG_A[:-1] + "".join(f", {k}: {v}" for k, v in kw.items()) + "}"


# -- kernel configs: one edit of examples/vector_add's text -> what the one line must name (ACCEPTED: valid) ------
KERNEL_EDITS = {
    # names and top-level keys
    "name with a slash": (sub("name: vector_add", "name: ../../etc/x"), "name"),
    "name empty": (sub("name: vector_add", "name: ''"), "name"),
    "name a list": (sub("name: vector_add", "name: [a, b]"), "name"),
    "name a formula": (sub("name: vector_add", "name: \"=cmd|' /C calc'!A0\""), "name"),
    "workload misspelt": (sub("workload: kernel", "workload: kernels"), "workload"),
    "description a mapping": (sub("description: c = a + b,", "description: {a: 1}\nx_:"), "description"),
    "an unknown top key": (sub("flops: N", "flops: N\nflop: N"), "flop"),
    "a key twice": (sub("flops: N", "flops: N\nflops: 2 * N"), "appears twice"),
    "merge key": (sub("variants:\n", "variants:\n  <<: {x: 1}\n"), "<<"),
    "precision unknown": (sub("rtol: 1e-7", "rtol: 1e-7\nprecision: fp128"), "precision"),
    "seed negative": (sub("rtol: 1e-7", "rtol: 1e-7\nseed: -1"), "seed"),
    "seed fractional": (sub("rtol: 1e-7", "rtol: 1e-7\nseed: 1.5"), "seed"),
    "seed past 32 bits": (sub("rtol: 1e-7", "rtol: 1e-7\nseed: 4294967296"), "seed"),
    "arch nonsense": (sub("rtol: 1e-7", "rtol: 1e-7\narch: sm_1; rm -rf ~"), "arch"),
    "strategy unknown": (sub("rtol: 1e-7", "rtol: 1e-7\nstrategy: genetic"), "strategy"),
    "budget negative": (sub("rtol: 1e-7", "rtol: 1e-7\nstrategy: random\nbudget: -5"), "budget"),
    "timing unknown key": (sub("timing: {budget: 0.3}", "timing: {budget: 0.3, speed: max}"), "speed"),
    "timing rtol": (sub("timing: {budget: 0.3}", "timing: {budget: 0.3, rtol: 0.1}"), "rtol"),
    "timing budget negative": (sub("timing: {budget: 0.3}", "timing: {budget: -0.3}"), "budget"),
    "timing budget nan": (sub("timing: {budget: 0.3}", "timing: {budget: .nan}"), "budget"),
    "timing watchdog inf": (sub("timing: {budget: 0.3}", "timing: {watchdog: .inf}"), "watchdog"),
    "timing a list": (sub("timing: {budget: 0.3}", "timing: [0.3]"), "timing"),
    # source, include and the files they name
    "source absolute": (sub("source: vector_add.cu", "source: /etc/passwd"), "/etc/passwd"),
    "source missing": (sub("source: vector_add.cu", "source: nosuch.cu"), "source"),
    "source the folder": (sub("source: vector_add.cu", "source: ."), "source"),
    "source empty": (sub("source: vector_add.cu", "source: ''"), "source"),
    "source a list": (sub("source: vector_add.cu", "source: [vector_add.cu]"), "source"),
    "include missing": (sub("source: vector_add.cu", "source: vector_add.cu\ninclude: [nosuch]"), "include"),
    "include a number": (sub("source: vector_add.cu", "source: vector_add.cu\ninclude: 5"), "include"),
    # args
    "args empty": (sub(ARG_A, "", ARG_B_SEED, ARG_B_SEED), "args"),
    "args a mapping": (sub("args:", "args: {a: 1}\nxargs:"), "args"),
    "arg unknown key": (sub(ARG_A, a_with(bogus=1)), "bogus"),
    "arg both kinds": (sub(ARG_A, a_with(scalar="int32")), "args"),
    "arg without a kind": (sub("array: float32, shape: [N], init: {normal", "shape: [N], init: {normal"), "args"),
    "arg dtype float128": (sub("array: float32, shape: [N], init: {normal", "array: float128, shape: [N], "
                                                                           "init: {normal"), "float128"),
    "arg dtype a list": (sub("array: float32, shape: [N], init: {normal", "array: [float32], shape: [N], "
                                                                         "init: {normal"), "array"),
    "scalar dtype bool": (sub(ARG_N, "{name: n, scalar: bool, value: N}"), "bool"),
    "arg name twice": (sub("{name: b,", "{name: a,"), "a"),
    "arg name a number": (sub("{name: b,", "{name: 5,"), "name"),
    "arg name python": (sub("{name: b,", "{name: __class__,"), ACCEPTED),
    "shape negative": (sub("shape: [N], init: {normal", "shape: [-N], init: {normal"), "shape"),
    "shape undefined name": (sub("shape: [N], init: {normal", "shape: [M], init: {normal"), "M"),
    "shape nan": (sub("shape: [N], init: {normal", "shape: [.nan], init: {normal"), "shape"),
    "shape fractional": (sub("shape: [N], init: {normal", "shape: [N / 3], init: {normal"), "shape"),
    "shape huge": (sub("shape: [N], init: {normal", "shape: [N, N, N, N, N], init: {normal"), "shape"),
    "shape a mapping": (sub("shape: [N], init: {normal", "shape: {N: 1}, init: {normal"), "shape"),
    "shape a call": (sub("shape: [N], init: {normal", "shape: [open('x')], init: {normal"), "shape"),
    "shape an attribute": (sub("shape: [N], init: {normal", "shape: [N.__class__], init: {normal"), "shape"),
    "shape a repeated tuple": (sub("shape: [N], init: {normal", "shape: [(N,) * 1000000000], init: {normal"),
                               "shape"),
    "init normal text": (sub("{normal: [0, 1]}", "{normal: [a, b]}"), "init"),
    "init normal std negative": (sub("{normal: [0, 1]}", "{normal: [0, -1]}"), "init"),
    "init normal three values": (sub("{normal: [0, 1]}", "{normal: [0, 1, 2]}"), "init"),
    "init normal nan": (sub("{normal: [0, 1]}", "{normal: [.nan, 1]}"), "init"),
    "init uniform reversed": (sub("{uniform: [-1, 1]}", "{uniform: [1, -1]}"), "init"),
    "init uniform inf": (sub("{uniform: [-1, 1]}", "{uniform: [-.inf, .inf]}"), "init"),
    "init kind unknown": (sub("{normal: [0, 1]}", "{poisson: 3}"), "poisson"),
    "init two kinds": (sub("{normal: [0, 1]}", "{normal: [0, 1], zeros: true}"), "init"),
    "init npy absolute": (sub("{normal: [0, 1]}", "{npy: /etc/passwd}"), "npy"),
    "init npy escaping": (sub("{normal: [0, 1]}", "{npy: ../../../etc/passwd}"), "npy"),
    "init npy missing": (sub("{normal: [0, 1]}", "{npy: nosuch.npy}"), "npy"),
    "init npy the source": (sub("{normal: [0, 1]}", "{npy: vector_add.cu}"), "npy"),
    "arg seed negative": (sub(ARG_B_SEED, "init: {uniform: [-1, 1]}, seed: -1}"), "seed"),
    "arg seed text": (sub(ARG_B_SEED, "init: {uniform: [-1, 1]}, seed: often}"), "seed"),
    "output yes as text": (sub("output: true}", "output: 'yes'}"), "output"),
    "output a number": (sub("output: true}", "output: 1}"), "output"),
    "no output": (sub(", output: true}", "}"), "output"),
    "scalar value a word": (sub(ARG_N, "{name: n, scalar: int32, value: hello}"), "hello"),
    "scalar value overflows": (sub(ARG_N, "{name: n, scalar: int32, value: N * 2**40}"), "value"),
    "scalar value negative unsigned": (sub(ARG_N, "{name: n, scalar: uint32, value: -N}"), "value"),
    "scalar value fractional": (sub(ARG_N, "{name: n, scalar: int32, value: N / 3}"), "value"),
    "scalar with a shape": (sub(ARG_N, "{name: n, scalar: int32, value: N, shape: [N]}"), "shape"),
    "scalar as output": (sub(ARG_N, "{name: n, scalar: int32, value: N, output: true}"), "output"),
    # variants
    "variants empty": (sub("variants:\n  vector_add:\n    kernel: vector_add\n", "variants: {}\nx_:\n  y:\n"),
                       "variants"),
    "variant unknown key": (sub("    kernel: vector_add\n", "    kernel: vector_add\n    threads: 5\n"), "threads"),
    "variant without a kernel": (sub("    kernel: vector_add\n", ""), "kernel"),
    "variant kernel a list": (sub("    kernel: vector_add\n", "    kernel: [vector_add]\n"), "kernel"),
    "variant kernel with a space": (sub("    kernel: vector_add\n", "    kernel: vector add; rm\n"), "kernel"),
    "variant source escaping": (sub("    kernel: vector_add\n", "    kernel: vector_add\n    source: ../../x.cu\n"),
                                "source"),
    "block four numbers": (sub("block: (BLOCK, 1, 1)", "block: (BLOCK, 1, 1, 1)"), "block"),
    "block past 1024 threads": (sub("block: (BLOCK, 1, 1)", "block: (BLOCK, 2, 1)"), "block"),
    "block zero": (sub("block: (BLOCK, 1, 1)", "block: (0, 1, 1)"), "block"),
    "block a word": (sub("block: (BLOCK, 1, 1)", "block: many"), "block"),
    "grid negative": (sub("grid: (cdiv(N, BLOCK * ITEMS), 1, 1)", "grid: (-1, 1, 1)"), "grid"),
    "grid past 2**31": (sub("grid: (cdiv(N, BLOCK * ITEMS), 1, 1)", "grid: (2**40, 1, 1)"), "grid"),
    "grid import": (sub("grid: (cdiv(N, BLOCK * ITEMS), 1, 1)", "grid: \"__import__('os').system('id')\""), "grid"),
    "grid lambda": (sub("grid: (cdiv(N, BLOCK * ITEMS), 1, 1)", "grid: \"(lambda: 1)()\""), "grid"),
    "grid a string inside": (sub("grid: (cdiv(N, BLOCK * ITEMS), 1, 1)", "grid: \"('a', 1, 1)\""), "grid"),
    "grid a comprehension": (sub("grid: (cdiv(N, BLOCK * ITEMS), 1, 1)", "grid: \"[i for i in (1, 2)]\""), "grid"),
    "grid cdiv by zero": (sub("grid: (cdiv(N, BLOCK * ITEMS), 1, 1)", "grid: (cdiv(N, 0), 1, 1)"), "grid"),
    "grid a power tower": (sub("grid: (cdiv(N, BLOCK * ITEMS), 1, 1)", "grid: (9**9**9**9, 1, 1)"), "grid"),
    "grid too long": (sub("grid: (cdiv(N, BLOCK * ITEMS), 1, 1)", "grid: (" + "1+" * 3000 + "1, 1, 1)"), "grid"),
    "shared negative": (sub("    kernel: vector_add\n", "    kernel: vector_add\n    shared: -4\n"), "shared"),
    "shared past a GPU": (sub("    kernel: vector_add\n", "    kernel: vector_add\n    shared: 2**40\n"), "shared"),
    "shared fractional": (sub("    kernel: vector_add\n", "    kernel: vector_add\n    shared: 10.5\n"), "shared"),
    "axes pow2 reversed": (sub(AXES, "axes: {BLOCK: {pow2: [1024, 64]}, ITEMS: [1]}"), "BLOCK"),
    "axes range step zero": (sub(AXES, "axes: {BLOCK: {start: 64, stop: 1024, step: 0}, ITEMS: [1]}"), "BLOCK"),
    "axes range past the cap": (sub(AXES, "axes: {BLOCK: {start: 1, stop: 1000000000000, step: 1}, ITEMS: [1]}"),
                                "BLOCK"),
    "axes empty list": (sub(AXES, "axes: {BLOCK: [], ITEMS: [1]}"), "BLOCK"),
    "axes bad name": (sub(AXES, "axes: {1BLOCK: [64], BLOCK: [64], ITEMS: [1]}"), "1BLOCK"),
    "axes names a problem axis": (sub(AXES, "axes: {BLOCK: [64], ITEMS: [1], N: [5]}"), "N"),
    "axes value a word": (sub(AXES, "axes: {BLOCK: [lots], ITEMS: [1]}"), "BLOCK"),
    "axes value nan": (sub(AXES, "axes: {BLOCK: [.nan], ITEMS: [1]}"), "BLOCK"),
    "axes value a mapping": (sub(AXES, "axes: {BLOCK: [{a: 1}], ITEMS: [1]}"), "BLOCK"),
    "axes key a list": (sub(AXES, "axes: {[1, 2]: [64], BLOCK: [64], ITEMS: [1]}"), "axes"),
    "axes a list": (sub(AXES, "axes: [BLOCK, ITEMS]"), "axes"),
    "axes past the points cap": (sub(AXES, "axes: {BLOCK: {start: 1, stop: 4096}, ITEMS: {start: 1, stop: 4096}}"),
                                 "axes"),
    "restrict nothing left": (sub("restrict: BLOCK * ITEMS <= 2048", "restrict: BLOCK < 0"), "excluded"),
    "restrict undefined name": (sub("restrict: BLOCK * ITEMS <= 2048", "restrict: WARPS > 1"), "WARPS"),
    "restrict a mapping": (sub("restrict: BLOCK * ITEMS <= 2048", "restrict: {a: 1}"), "restrict"),
    "restrict a repeated tuple": (sub("restrict: BLOCK * ITEMS <= 2048", "restrict: (BLOCK,) * 10**7 != ()"),
                                  "restrict"),
    "restrict a string compare": (sub("restrict: BLOCK * ITEMS <= 2048", "restrict: \"'a' * 10**9 > 'b'\""),
                                  "restrict"),
    # problems
    "problems empty": (sub(PROBLEMS, "[]\nx_:"), "problems"),
    "problems a mapping": (sub("problems:\n  " + PROBLEMS, "problems: {N: 5}"), ACCEPTED),
    "problem negative": (sub(PROBLEMS, "- {N: [-100]}"), "problems"),
    "problem zero": (sub(PROBLEMS, "- {N: [0]}"), "problems"),
    "problem a word": (sub(PROBLEMS, "- {N: [big]}"), "problems"),
    "problem true": (sub(PROBLEMS, "- {N: [true]}"), "problems"),
    "problem nested list": (sub(PROBLEMS, "- {N: [[100]]}"), "problems"),
    "problem past 2**70": (sub(PROBLEMS, "- {N: [1180591620717411303424]}"), "2**63"),
    "problem nan": (sub(PROBLEMS, "- {N: [.nan]}"), "problems"),
    "problem axis not used": (sub(PROBLEMS, "- {N: [100], M: [5]}"), ACCEPTED),
    "problem axis missing": (sub(PROBLEMS, "- {M: [100]}"), "N"),
    "problems past the cap": (sub(PROBLEMS, "- {N: [" + ", ".join(str(i) for i in range(1, 10002)) + "]}"),
                              "problems"),
    "problem an expression": (sub(PROBLEMS, "- {N: [2**10]}"), "problems"),
    # flops, bytes, rtol
    "flops negative": (sub("flops: N", "flops: -N"), "flops"),
    "flops a word": (sub("flops: N", "flops: lots"), "flops"),
    "flops complex": (sub("flops: N", "flops: (-N) ** 0.5"), "flops"),
    "flops divided by zero": (sub("flops: N", "flops: N / 0"), "flops"),
    "bytes nan": (sub("bytes: 12 * N", "bytes: .nan"), "bytes"),
    "bytes a list": (sub("bytes: 12 * N", "bytes: [12, N]"), "bytes"),
    "rtol negative": (sub("rtol: 1e-7", "rtol: -1e-7"), "rtol"),
    "rtol a word": (sub("rtol: 1e-7", "rtol: tight"), "rtol"),
    "rtol nan": (sub("rtol: 1e-7", "rtol: .nan"), "rtol"),
    "rtol inf": (sub("rtol: 1e-7", "rtol: .inf"), "rtol"),
    # references and baselines
    "reference os.system": (sub("reference: reference:vector_add", "reference: os:system"), "reference"),
    "reference pickle.loads": (sub("reference: reference:vector_add", "reference: pickle:loads"), "reference"),
    "reference builtins.exec": (sub("reference: reference:vector_add", "reference: builtins:exec"), "reference"),
    "reference a dotted module": (sub("reference: reference:vector_add", "reference: os.path:join"), "reference"),
    "reference escaping": (sub("reference: reference:vector_add", "reference: ../../evil:f"), "reference"),
    "reference no colon": (sub("reference: reference:vector_add", "reference: reference"), "reference"),
    "reference a list": (sub("reference: reference:vector_add", "reference: [reference, vector_add]"), "reference"),
    "reference and baseline": (sub("reference: reference:vector_add", "reference: reference:vector_add\n"
                                                                      "baseline: vector_add"), ACCEPTED),
    "neither reference nor baseline": (sub("reference: reference:vector_add", ""), "reference"),
    "baseline unknown": (sub("reference: reference:vector_add", "baseline: nosuch"), "nosuch"),
    # YAML itself
    "a python tag": (sub("description: c = a + b,", "description: !!python/object/apply:os.system [touch PWNED]\n"
                                                    "x_:"), "description"),
    "a python tag on a problem": (sub("- {N: [100, 200]}", "- {N: !!python/object/apply:os.getpid []}"), "tag"),
    "a local tag": (sub("flops: N", "flops: !expr N"), "flops"),
    "a tab indent": (sub("    kernel: vector_add\n", "\tkernel: vector_add\n"), "not valid YAML"),
    "a billion laughs": (sub("description: c = a + b,", "description: &a [x, x, x, x, x, x, x, x, x]\nl1: &b ["
                             + ", ".join(["*a"] * 9) + "]\nl2: &c [" + ", ".join(["*b"] * 9) + "]\nl3: ["
                             + ", ".join(["*c"] * 9) + "]\nx_:"), "description"),
    "an alias bomb in axes": (sub(AXES, "axes: {BLOCK: &a [[64, 64], [64, 64]], ITEMS: [*a, *a, *a]}"), "BLOCK"),
    # valid after all
    "an alias repeating a value": (sub("- {N: [100, 200]}", "- {N: &n [100, 200]}\n  - {N: *n}"), ACCEPTED),
    "CRLF line ends": (lambda t: t.replace("\n", "\r\n"), ACCEPTED),
    "a byte-order mark": (lambda t: "\ufeff" + t, ACCEPTED),
    "one problem value": (sub(PROBLEMS, "- {N: 100}"), ACCEPTED),
    "unicode description": (sub("description: c = a + b,", "description: c = a + b, ünïcødé ≤ 2⁴ →"), ACCEPTED),
}


@pytest.mark.parametrize("name", list(KERNEL_EDITS))
def test_hostile_kernel_edit(tmp_path, name):
    edit, needles = KERNEL_EDITS[name]
    res = invoke("sweep", kernel(tmp_path, edit), "--dry-run", "--backend", "cpu")
    if needles is not ACCEPTED:
        needles = ("vector_add.yaml", *(needles if isinstance(needles, tuple) else (needles,)))
    outcome(res, needles)
    assert not (tmp_path / "PWNED").exists() and not (tmp_path / "k" / "PWNED").exists()


# -- kernel configs: the file itself, and the files beside it ---------------------------------------------------
def _write(path: Path, data: bytes):
    path.write_bytes(data)
    return path


def _npy(tmp_path, array) -> None:
    import numpy as np
    np.save(tmp_path / "k" / "in.npy", array, allow_pickle=True)


def _fifo(tmp_path, name):
    os.mkfifo(tmp_path / name)
    return tmp_path / name


KERNEL_FILES = {  # how the config (or a file it names) is made -> what the one line must name
    "empty file": (lambda t: _write(t / "c.yaml", b""), ("c.yaml", "empty")),
    "only a comment": (lambda t: _write(t / "c.yaml", b"# nothing\n"), ("c.yaml", "empty")),
    "a list at the top": (lambda t: _write(t / "c.yaml", b"- suite: kernel\n"), ("c.yaml", "mapping")),
    "a scalar at the top": (lambda t: _write(t / "c.yaml", b"kernel\n"), ("c.yaml", "mapping")),
    "latin-1": (lambda t: _write(t / "c.yaml", b"suite: kernel\ndescription: caf\xe9\n"), ("c.yaml", "UTF-8")),
    "utf-16": (lambda t: _write(t / "c.yaml", "suite: kernel\n".encode("utf-16")), ("c.yaml", "UTF-8")),
    "a NUL byte": (lambda t: _write(t / "c.yaml", b"suite: kernel\x00\n"), "c.yaml"),
    "a control byte": (lambda t: _write(t / "c.yaml", b"suite: kernel\x07\n"), "c.yaml"),
    "deep nesting": (lambda t: _write(t / "c.yaml", b"a: " + b"[" * 5000 + b"]" * 5000 + b"\n"), "c.yaml"),
    "a folder": (lambda t: (t / "d.yaml").mkdir() or t / "d.yaml", "d.yaml"),
    "a missing file": (lambda t: t / "nosuch.yaml", "nosuch.yaml"),
    "a symlink loop": (lambda t: os.symlink(t / "loop.yaml", t / "loop.yaml") or t / "loop.yaml", "loop.yaml"),
    "a dangling symlink": (lambda t: os.symlink(t / "gone", t / "dang.yaml") or t / "dang.yaml", "dang.yaml"),
    "/dev/zero": (lambda t: os.symlink("/dev/zero", t / "zero.yaml") or t / "zero.yaml", "zero.yaml"),
    "a FIFO": (lambda t: _fifo(t, "fifo.yaml"), "fifo.yaml"),
    "unreadable": (lambda t: _write(t / "u.yaml", b"suite: kernel\n").chmod(0) or t / "u.yaml", "u.yaml"),
    "no suffix": (lambda t: _write(t / "config", b"suite: kernel\n"), "config"),
}


@pytest.mark.parametrize("name", list(KERNEL_FILES))
def test_hostile_config_file(tmp_path, name):
    if name == "unreadable" and os.geteuid() == 0:
        pytest.skip("root reads any file")
    make, needles = KERNEL_FILES[name]
    outcome(invoke("sweep", make(tmp_path), "--dry-run", "--backend", "cpu"), needles)


def _cu(tmp_path, target):
    (tmp_path / "k" / "vector_add.cu").unlink()
    os.symlink(target, tmp_path / "k" / "vector_add.cu")


BESIDE = {  # a file the config names, damaged after the copy -> what the one line must name
    "npy of objects": (lambda t: _npy(t, __import__("numpy").array([{"a": 1}] * 100, dtype=object)), "npy"),
    "npy of the wrong shape": (lambda t: _npy(t, __import__("numpy").zeros((3, 3), "float32")), "npy"),
    "npy of text": (lambda t: _npy(t, __import__("numpy").array(["a"] * 100)), "npy"),
    "npy cut short": (lambda t: _write(t / "k" / "in.npy", b"\x93NUMPY\x01\x00"), "npy"),
    "npy a FIFO": (lambda t: _fifo(t / "k", "in.npy"), "npy"),
    "source /dev/zero": (lambda t: _cu(t, "/dev/zero"), "vector_add.cu"),
    "source a FIFO": (lambda t: (t / "k" / "vector_add.cu").unlink() or _fifo(t / "k", "vector_add.cu"),
                      "vector_add.cu"),
    "source a symlink loop": (lambda t: _cu(t, t / "k" / "vector_add.cu"), "vector_add.cu"),
}


@pytest.mark.parametrize("name", list(BESIDE))
@pytest.mark.parametrize("mode", ["--dry-run", "--compile-only"])
def test_hostile_file_beside_a_config(tmp_path, name, mode):
    if mode == "--compile-only" and "npy" in name:
        pytest.skip("inputs are built when the cases run, not to compile them")
    make, needle = BESIDE[name]
    config = kernel(tmp_path, sub("{normal: [0, 1]}", "{npy: in.npy}"))
    make(tmp_path)
    outcome(invoke("sweep", config, mode, "--backend", "cpu"), needle)


def test_a_config_that_only_names_data_runs_no_code(tmp_path):
    """reference.py beside the config writes a file when imported: --dry-run and --compile-only must not import it."""
    config = kernel(tmp_path)
    ref = tmp_path / "k" / "reference.py"
    ref.write_text(f"open({str(tmp_path / 'IMPORTED')!r}, 'w').close()\n" + ref.read_text())
    for mode in ("--dry-run", "--compile-only"):
        invoke("sweep", config, mode, "--backend", "cpu")
    assert not (tmp_path / "IMPORTED").exists()


# -- sweep configs of the built-in suites -----------------------------------------------------------------------
GEMM = "name: g\nworkload: gemm\nshapes:\n  - [16, 16, 16]\nvariants:\n  tiled:\n    axes:\n      ts: [8]\n"

SWEEP_EDITS = {  # an edit of GEMM -> what the one line must name
    "workload unknown": (sub("workload: gemm", "workload: fft"), "fft"),
    "workload missing": (sub("workload: gemm\n", ""), "workload"),
    "variant unknown": (sub("  tiled:", "  quantum:"), "quantum"),
    "variant twice": (sub("      ts: [8]\n", "      ts: [8]\n  tiled:\n    axes: {ts: [16]}\n"), "tiled"),
    "axis unknown": (sub("ts: [8]", "warp: [8]"), "warp"),
    "axis value zero": (sub("ts: [8]", "ts: [0]"), "ts"),
    "axis value negative": (sub("ts: [8]", "ts: [-8]"), "ts"),
    "axis value text": (sub("ts: [8]", "ts: [eight]"), "ts"),
    "axis pow2 past the cap": (sub("ts: [8]", "ts: {pow2: [1, 1000000]}"), "ts"),
    "shape of two": (sub("[16, 16, 16]", "[16, 16]"), "shapes"),
    "shape negative": (sub("[16, 16, 16]", "[16, -16, 16]"), "shapes"),
    "shape zero": (sub("[16, 16, 16]", "[16, 0, 16]"), "shapes"),
    "shape text": (sub("[16, 16, 16]", "[a, b, c]"), "shapes"),
    "shape nan": (sub("[16, 16, 16]", "[.nan, 16, 16]"), "shapes"),
    "shapes empty": (sub("shapes:\n  - [16, 16, 16]\n", "shapes: []\n"), "shapes"),
    "shapes a string": (sub("shapes:\n  - [16, 16, 16]\n", "shapes: square\n"), "shapes"),
    "timing budget text": (sub("name: g\n", "name: g\ntiming: {budget: soon}\n"), "budget"),
    "timing min_samples zero": (sub("name: g\n", "name: g\ntiming: {min_samples: 0}\n"), "min_samples"),
    "timing max_noise negative": (sub("name: g\n", "name: g\ntiming: {max_noise: -1}\n"), "max_noise"),
    "timing cold text": (sub("name: g\n", "name: g\ntiming: {cold: maybe}\n"), "cold"),
    "seed text": (sub("name: g\n", "name: g\nseed: abc\n"), "seed"),
    "baseline unknown variant": (sub("name: g\n", "name: g\nbaseline: nosuch\n"), "baseline"),
    "parts empty": (lambda t: "name: g\nparts: []\n", "parts"),
    "parts of a list": (lambda t: "name: g\nparts: [[1]]\n", "parts"),
    "parts with a shape key": (lambda t: "name: g\nshapes: [[1, 1, 1]]\nparts: [{workload: gemm}]\n", "shapes"),
    "restrict python": (sub("      ts: [8]\n", "      ts: [8]\n    restrict: [\"ts.__class__\"]\n"), "restrict"),
    "a python tag": (sub("name: g\n", "name: !!python/name:os.system g\n"), "name"),
}


@pytest.mark.parametrize("name", list(SWEEP_EDITS))
def test_hostile_sweep_config(tmp_path, name):
    edit, needle = SWEEP_EDITS[name]
    path = tmp_path / "g.yaml"
    path.write_text(edit(GEMM))
    outcome(invoke("sweep", path, "--dry-run", "--backend", "cpu"), ("g.yaml", needle))


def test_every_shipped_sweep_config_dry_runs(tmp_path):
    """The campaign's baseline: the repository's own configs are valid (ACCEPTED), so a refusal above is the edit's."""
    for config in sorted((paths.ROOT / "configs").glob("*.yaml")):
        if not re.search(r"^(suite|parts):", config.read_text(), re.M):
            continue  # tables that other commands read (conv.yaml's layer sets, nets.yaml), not sweeps
        outcome(invoke("sweep", config, "--dry-run", "--backend", "cpu"), ACCEPTED)


# -- result files fed to check, report and history --------------------------------------------------------------
def csv_rows(good):
    return list(csv.DictReader(good[0].open()))


def write_csv(tmp_path, header, rows, name="bad.csv") -> Path:
    out = tmp_path / name
    with out.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return out


def _csv_cell(column, value):
    return lambda good, t: damaged_csv(good, t, column, value)


def _json_change(change):
    return lambda good, t: damaged_json(good, t, change)


def _json_lines(*lines):
    def make(good, t):
        head = good[1].read_text().splitlines()[0]
        (t / "bad.jsonl").write_text("\n".join([head, *lines]) + "\n")
        return t / "bad.jsonl"
    return make


def _dup_column(good, t):
    rows = csv_rows(good)
    header = list(rows[0]) + ["median_ms"]
    return write_csv(t, header, [list(rows[0].values()) + ["999"]])


def _drop_column(column):
    def make(good, t):
        rows = csv_rows(good)
        header = [h for h in rows[0] if h != column]
        return write_csv(t, header, [[rows[0][h] for h in header]])
    return make


def _raw(data: bytes, name="bad.csv"):
    return lambda good, t: _write(t / name, data)


def _extra_cells(good, t):
    rows = csv_rows(good)
    return write_csv(t, list(rows[0]), [list(rows[0].values()) + ["x", "y"]])


GATE = {"check": INVALID, "check-baseline": INVALID}  # check judges a damaged median as the case's verdict
OLD_TRAIN_FILES = {"report": ACCEPTED}  # report plots older train CSVs, which have no median_ms (tests/data)
RESULT_FILES = {  # a damaged result file -> what the one line must name[, and another class for some commands]
    "median text": (_csv_cell("median_ms", "fast"), "median_ms", GATE),
    "median negative": (_csv_cell("median_ms", "-1"), "median_ms", GATE),
    "median nan": (_csv_cell("median_ms", "nan"), "median_ms", GATE),
    "median inf": (_csv_cell("median_ms", "inf"), "median_ms", GATE),
    "median a formula": (_csv_cell("median_ms", "=1+1"), "median_ms", GATE),
    "samples negative": (_csv_cell("samples", "-5"), "samples"),
    "samples fractional": (_csv_cell("samples", "2.5"), "samples"),
    "suite empty": (_csv_cell("suite", ""), "suite"),
    "variant empty": (_csv_cell("variant", ""), "variant"),
    "dropped text": (_csv_cell("dropped", "some"), "dropped"),
    "dropped infinite": (_csv_cell("dropped", "1e400"), "dropped"),
    "dropped negative": (_csv_cell("dropped", "-1"), "dropped"),
    "batch text": (_csv_cell("batch", "big"), "batch"),
    "samples_ms nan": (_csv_cell("samples_ms", "nan nan"), "samples_ms"),
    "samples_ms negative": (_csv_cell("samples_ms", "-0.1 0.2"), "samples_ms"),
    "a column twice": (_dup_column, "median_ms"),
    "no status column": (_drop_column("status"), "status"),
    "no median column": (_drop_column("median_ms"), "median_ms", OLD_TRAIN_FILES),
    "more cells than columns": (_extra_cells, "bad.csv:2"),
    "empty file": (_raw(b""), "bad.csv"),
    "binary": (_raw(bytes(range(256)) * 4), "bad.csv"),
    "latin-1 cell": (lambda good, t: _write(t / "bad.csv", good[0].read_bytes().replace(b"numpy", b"nump\xff")),
                     "bad.csv"),
    "a NUL byte": (lambda good, t: _write(t / "bad.csv", good[0].read_bytes().replace(b"numpy", b"nu\x00py")),
                   "bad.csv"),
    "a foreign CSV": (_raw(b"name,age\nbob,3\n"), "bad.csv"),
    "json not an object": (_json_lines("[1, 2, 3]"), "bad.jsonl:2"),
    "json null": (_json_lines("null"), "bad.jsonl:2"),
    "json a broken line": (_json_lines('{"suite": "gemm", ', '{"suite": "gemm"}'), "bad.jsonl:2"),
    "json median text": (_json_change(lambda r: r.update(median_ms="fast")), "median_ms", GATE),
    "json median NaN": (_json_change(lambda r: r.update(median_ms=math.nan)), "median_ms", GATE),
    "json median true": (_json_change(lambda r: r.update(median_ms=True)), "median_ms"),
    "json workload a number": (_json_change(lambda r: r.update(workload=5)), "workload"),
    "json variant null": (_json_change(lambda r: r.update(variant=None)), "variant"),
    "json raw a list": (_json_change(lambda r: r.update(raw=[1])), "raw"),
    "json samples a dict": (_json_change(lambda r: r.update(samples={"n": 1})), "samples"),
    "json without a header": (lambda good, t: _write(t / "bad.jsonl", good[1].read_text().splitlines()[1].encode()
                                                     + b"\n"), "bad.jsonl"),
    "json a foreign header": (lambda good, t: _write(t / "bad.jsonl", b'{"format": "other", "schema_version": 99}\n'
                                                     + good[1].read_text().splitlines()[1].encode() + b"\n"),
                              "bad.jsonl"),
    "json schema from the future": (lambda good, t: _write(t / "bad.jsonl", good[1].read_text().replace(
        f'"schema_version": {rawresults.SCHEMA_VERSION}', '"schema_version": 99', 1).encode()), "schema_version"),
}


def _result_args(command, bad, good, tmp_path):
    same = good[1] if bad.suffix == ".jsonl" else good[0]
    return {"check": ["check", bad, same], "check-baseline": ["check", same, bad],
            "report": ["report", bad, "--json", tmp_path / "r.jsonl"],
            "history": ["history", "record", bad, "--db", tmp_path / "h.sqlite"]}[command]


@pytest.mark.parametrize("name", list(RESULT_FILES))
@pytest.mark.parametrize("command", ["check", "check-baseline", "report", "history"])
def test_hostile_result_file(good, tmp_path, name, command):
    make, needle, *other = RESULT_FILES[name]
    needle = other[0].get(command, needle) if other else needle
    bad = make(good, tmp_path)
    res = invoke(*_result_args(command, bad, good, tmp_path))
    outcome(res, needle)
    assert needle is ACCEPTED or not (tmp_path / "r.jsonl").exists()


def test_a_formula_cell_cannot_run_in_a_spreadsheet(tmp_path):
    """A CSV that nnbench writes never starts a text cell with a spreadsheet formula (=, +, -, @): no name or free text
    that a config gives reaches one unchecked, so a result file opened in Excel or LibreOffice computes nothing."""
    config = kernel(tmp_path, sub("name: vector_add", "name: \"@SUM(1+1)*cmd|' /C calc'!A0\""))
    outcome(invoke("sweep", config, "--dry-run", "--backend", "cpu"), ("vector_add.yaml", "name"))


# -- history: databases and options -----------------------------------------------------------------------------
def _sqlite_of_another_app(t):
    import sqlite3
    db = t / "other.sqlite"
    con = sqlite3.connect(db)
    con.execute("create table users (name text)")
    con.commit()
    con.close()
    return db


HISTORY_DB = {  # --db -> what the one line must name; the file must be left as it was
    "a folder": (lambda t: t, "is a folder"),
    "/dev/full": (lambda t: Path("/dev/full"), "/dev/full"),
    "/dev/null": (lambda t: Path("/dev/null"), "/dev/null"),
    "a text file": (lambda t: _write(t / "notes.txt", b"my notes\n" * 100), "notes.txt"),
    "a CSV": (lambda t: _write(t / "x.csv", b"a,b\n1,2\n"), "x.csv"),
    "another app's SQLite": (_sqlite_of_another_app, "other.sqlite"),
    "a FIFO": (lambda t: _fifo(t, "db.sqlite"), "db.sqlite"),
    "a bad URL": (lambda t: "postgresql://", "postgresql://"),
    "an unknown scheme": (lambda t: "mysql://u@h/db", "--db"),
    "a blank": (lambda t: "   ", "--db"),
}


def _digest(p):
    p = Path(p)
    return p.read_bytes() if p.is_file() and not stat.S_ISFIFO(p.stat().st_mode) else None


@pytest.mark.parametrize("name", list(HISTORY_DB))
@pytest.mark.parametrize("command", ["record", "show"])
def test_hostile_history_db(good, tmp_path, name, command):
    make, needle = HISTORY_DB[name]
    db = make(tmp_path)
    before = _digest(db) if isinstance(db, Path) and str(db).startswith(str(tmp_path)) else None
    args = ["history", "record", good[0], "--db", db] if command == "record" else \
        ["history", "show", "--db", db, "--no-png"]
    outcome(invoke(*args), needle)
    if before is not None:
        assert _digest(db) == before
        assert not list(Path(db).parent.glob(Path(db).name + "-*")), "a -wal or -shm file left beside it"


HISTORY_OPTIONS = {  # argv after `history` ({db}: a recorded database, {good}: the result CSV) -> the needle
    "show min-change negative": (["show", "--db", "{db}", "--no-png", "--min-change", "-1"], "--min-change"),
    "show min-change nan": (["show", "--db", "{db}", "--no-png", "--min-change", "nan"], "--min-change"),
    "show pvalue 2": (["show", "--db", "{db}", "--no-png", "--pvalue", "2"], "--pvalue"),
    "show pvalue zero": (["show", "--db", "{db}", "--no-png", "--pvalue", "0"], "--pvalue"),
    "show pvalue text": (["show", "--db", "{db}", "--no-png", "--pvalue", "low"], "--pvalue"),
    "show png a file": (["show", "--db", "{db}", "--png", "{good}"], "--png"),
    "show png /dev/full": (["show", "--db", "{db}", "--png", "/dev/full"], "--png"),
    "show png and no-png": (["show", "--db", "{db}", "--png", "{tmp}/p", "--no-png"], "--no-png"),
    "show a case matching nothing": (["show", "--db", "{db}", "--no-png", "--case", "nosuch*"], "nosuch*"),
    "show a gpu matching nothing": (["show", "--db", "{db}", "--no-png", "--gpu", "Voodoo 2"], "Voodoo 2"),
    "show json /dev/full": (["show", "--db", "{db}", "--no-png", "--json", "/dev/full"], "/dev/full"),
    "show json a folder": (["show", "--db", "{db}", "--no-png", "--json", "{tmp}"], "--json"),
    "record no files": (["record", "--db", "{db}"], "RESULTS"),
    "record a folder": (["record", "{tmp}", "--db", "{db}"], "is a directory"),
    "record /dev/null": (["record", "/dev/null", "--db", "{db}"], "/dev/null"),
    "record a yaml": (["record", "{config}", "--db", "{db}"], "g.yaml"),
    "record json /dev/full": (["record", "{good}", "--db", "{db}", "--json", "/dev/full"], "/dev/full"),
    "record the db itself": (["record", "{db}", "--db", "{db}"], "h.sqlite"),
    "an unknown subcommand": (["forget", "--db", "{db}"], "forget"),
    "show a recorded history": (["show", "--db", "{db}", "--no-png"], ACCEPTED),
    "record twice": (["record", "{good}", "--db", "{db}"], ACCEPTED),
}


@pytest.mark.parametrize("name", list(HISTORY_OPTIONS))
def test_hostile_history_option(good, tmp_path, name):
    db = tmp_path / "h.sqlite"
    outcome(invoke("history", "record", good[0], "--db", db), ACCEPTED)
    argv, needle = HISTORY_OPTIONS[name]
    (tmp_path / "g.yaml").write_text(GEMM)
    fill = {"{db}": str(db), "{good}": str(good[0]), "{tmp}": str(tmp_path), "{config}": str(tmp_path / "g.yaml")}
    args = []
    for a in argv:
        for k, v in fill.items():
            a = a.replace(k, v)
        args.append(a)
    outcome(invoke("history", *args), needle)


# -- every command's options ------------------------------------------------------------------------------------
CPU = ["--backend", "cpu"]
CI_YAML = str(paths.ROOT / "configs" / "ci.yaml")
VECTOR_ADD = str(paths.ROOT / "examples" / "vector_add" / "vector_add.yaml")
OPTIONS = {  # argv ({good}: a result CSV, {tmp}: the test's folder) -> what the one line must name
    "gemm variant unknown": (["gemm", *CPU, "-v", "quantum", "--size", "16"], "quantum"),
    "gemm size zero": (["gemm", *CPU, "--size", "0"], "--size"),
    "gemm size and m": (["gemm", *CPU, "--size", "16", "--m", "16"], "--size"),
    "gemm budget zero": (["gemm", *CPU, "--size", "16", "--budget", "0"], "--budget"),
    "gemm rtol nan": (["gemm", *CPU, "--size", "16", "--rtol", "nan"], "--rtol"),
    "gemm seed text": (["gemm", *CPU, "--size", "16", "--seed", "x"], "--seed"),
    "gemm seed past 64 bits": (["gemm", *CPU, "--size", "16", "--seed", str(2**64)], "--seed"),
    "gemm arch without compile-only": (["gemm", *CPU, "--size", "16", "--arch", "sm_90"], "--arch"),
    "gemm arch nonsense": (["gemm", "--compile-only", "--arch", "sm_9x"], "--arch"),
    "gemm backend unknown": (["gemm", "--backend", "tpu"], "--backend"),
    "gemm device negative": (["gemm", *CPU, "--device", "-1"], "--device"),
    "gemm csv a folder": (["gemm", *CPU, "--size", "16", "--budget", "0.01", "--csv", "{tmp}"], "{tmp}"),
    "gemm csv /dev/full": (["gemm", *CPU, "--size", "16", "--budget", "0.01", "--csv", "/dev/full"], "/dev/full"),
    "gemm csv exists": (["gemm", *CPU, "--size", "16", "--budget", "0.01", "--csv", "{good}"], "--force"),
    "gemm json a folder": (["gemm", *CPU, "--size", "16", "--budget", "0.01", "--json", "{tmp}"], "{tmp}"),
    "gemm sanitize on cpu": (["gemm", *CPU, "--size", "16", "--sanitize", "memcheck"], "--sanitize"),
    "gemm ts with no variant": (["gemm", *CPU, "--size", "16", "--ts", "-4"], "--ts"),
    "gemm an unknown option": (["gemm", *CPU, "--turbo"], "--turbo"),
    "train net 9": (["train", *CPU, "--net", "9"], "--net"),
    "train net and layers": (["train", *CPU, "--net", "1", "--layers", "60,10,4"], "--layers"),
    "train layers one": (["train", *CPU, "--layers", "60"], "--layers"),
    "train layers zero": (["train", *CPU, "--layers", "60,0,4"], "--layers"),
    "train layers text": (["train", *CPU, "--layers", "a,b,c"], "--layers"),
    "train momentum one": (["train", *CPU, "--net", "1", "--momentum", "1"], "--momentum"),
    "train init unknown": (["train", *CPU, "--net", "1", "--init", "he"], "--init"),
    "train encoding 61": (["train", *CPU, "--net", "1", "--encoding", "61"], "--encoding"),
    "train epochs without batch": (["train", *CPU, "--net", "1", "--epochs", "3"], "--epochs"),
    "train gpus text": (["train", *CPU, "--net", "1", "--batch", "4", "--gpus", "two"], "--gpus"),
    "train allreduce unknown": (["train", *CPU, "--allreduce", "gloo"], "--allreduce"),
    "train compare unknown": (["train", *CPU, "--compare", "jax"], "--compare"),
    "train bucket-mb negative": (["train", *CPU, "--net", "1", "--batch", "4", "--gpus", "1", "--bucket-mb", "-1"],
                                 "--bucket-mb"),
    "conv set unknown": (["conv", *CPU, "--set", "nosuch"], "nosuch"),
    "conv path unknown": (["conv", *CPU, "-p", "fft", "--set", "odd"], "fft"),
    "conv filter past the input": (["conv", *CPU, "--n", "1", "--c", "1", "--h", "4", "--w", "4", "--k", "1",
                                    "--r", "9"], "--r"),
    "conv zero images": (["conv", *CPU, "--n", "0", "--c", "1", "--h", "4", "--w", "4", "--k", "1", "--r", "3"],
                         "--n"),
    "conv negative pad": (["conv", *CPU, "--n", "1", "--c", "1", "--h", "4", "--w", "4", "--k", "1", "--r", "3",
                           "--pad", "-1"], "--pad"),
    "conv model and layer": (["conv", *CPU, "--model", "lenet5", "--set", "odd"], "--model"),
    "conv tile zero": (["conv", *CPU, "--set", "odd", "--tile", "0"], "--tile"),
    "sweep jobs zero": (["sweep", CI_YAML, *CPU, "--dry-run", "--jobs", "0"], "--jobs"),
    "sweep gpus zero": (["sweep", CI_YAML, *CPU, "--dry-run", "--gpus", "0"], "--gpus"),
    "sweep gpus superscript": (["sweep", CI_YAML, *CPU, "--gpus", "²"], "--gpus"),
    "sweep dry-run and compile-only": (["sweep", CI_YAML, *CPU, "--dry-run", "--compile-only"],
                                       "--compile-only"),
    "sweep replay missing": (["sweep", CI_YAML, "--replay", "{tmp}/nosuch.csv"], "nosuch.csv"),
    "sweep out a folder": (["sweep", CI_YAML, *CPU, "--out", "{tmp}"], "{tmp}"),
    "sweep out /dev/full": (["sweep", CI_YAML, *CPU, "--out", "/dev/full", "--fresh"], "/dev/full"),
    "sweep no config": (["sweep", *CPU], "CONFIG"),
    "sweep arch without compile-only": (["sweep", CI_YAML, *CPU, "--arch", "sm_90"], "--arch"),
    "check tolerance a word": (["check", "{good}", "{good}", "--tolerance", "loose"], "--tolerance"),
    "check format unknown": (["check", "{good}", "{good}", "--format", "yaml"], "--format"),
    "check run and two files": (["check", "{good}", "{good}", "--run", CI_YAML], "--run"),
    "check baseline without run": (["check", "{good}", "{good}", "--baseline", "{good}"], "--baseline"),
    "check db without history": (["check", "{good}", "{good}", "--db", "{tmp}/h.sqlite"], "--db"),
    "check one file": (["check", "{good}"], "check"),
    "check the same file": (["check", "{good}", "{good}"], ACCEPTED),
    "check a missing baseline": (["check", "{tmp}/nosuch.csv", "{good}"], "nosuch.csv"),
    "check an empty baseline folder": (["check", "{tmp}/empty", "{good}"], "empty"),
    "report plot unknown": (["report", "{good}", "--plot", "pie", "--out", "{tmp}/p.png"], "--plot"),
    "report plot without out": (["report", "{good}", "--plot", "roofline"], "--out"),
    "report ceilings text": (["report", "{good}", "--plot", "roofline", "--out", "{tmp}/p", "--ceilings", "a,b"],
                             "--ceilings"),
    "report ceilings negative": (["report", "{good}", "--plot", "roofline", "--out", "{tmp}/p", "--ceilings",
                                  "-1,5"], "--ceilings"),
    "report ceilings one": (["report", "{good}", "--plot", "roofline", "--out", "{tmp}/p", "--ceilings", "5"],
                            "--ceilings"),
    "report tolerance without baseline": (["report", "{good}", "--html", "{tmp}/r.html", "--tolerance", "5%"],
                                          "--tolerance"),
    "report no output": (["report", "{good}"], "--html"),
    "report missing file": (["report", "{tmp}/nosuch.csv", "--json", "{tmp}/r.jsonl"], "nosuch.csv"),
    "profile variant unknown": (["profile", "gemm", "-v", "quantum", *CPU], "quantum"),
    "profile workload unknown": (["profile", "fft", "-v", "tiled", *CPU], "fft"),
    "profile layer of three": (["profile", "conv", "-v", "direct", *CPU, "--layer", "1,2,3"], "--layer"),
    "profile problem without config": (["profile", "gemm", "-v", "tiled", *CPU, "--problem", "2"], "--problem"),
    "profile problem past the config": (["profile", "kernel", "-v", "vector_add", *CPU, "--config",
                                         VECTOR_ADD, "--problem", "99"], "--problem"),
    "profile ncu-csv without ncu": (["profile", "gemm", "-v", "tiled", *CPU, "--ncu-csv", "{tmp}/n.csv"],
                                    "--ncu-csv"),
    "soak seeds zero": (["soak", *CPU, "--seeds", "0"], "--seeds"),
    "soak workload unknown": (["soak", *CPU, "--workload", "fft"], "--workload"),
    "soak seeds and seed": (["soak", *CPU, "--seeds", "2", "--seed", "5"], "--seed"),
    "a command that does not exist": (["benchmark"], "benchmark"),
}


@pytest.mark.parametrize("name", list(OPTIONS))
def test_hostile_option(good, tmp_path, name):
    argv, needle = OPTIONS[name]
    (tmp_path / "empty").mkdir()
    fill = {"{good}": str(good[0]), "{tmp}": str(tmp_path)}

    def filled(a):
        for k, v in fill.items():
            a = a.replace(k, v)
        return a
    needle = needle if needle is ACCEPTED else filled(needle)
    outcome(invoke(*[filled(a) for a in argv]), needle)


# -- where reports go -------------------------------------------------------------------------------------------
def _unwritable(t, name):
    d = t / "ro"
    d.mkdir()
    d.chmod(0o500)
    return d / name


def _symlink_to_a_victim(t, name):
    _write(t / "victim", b"not nnbench's")
    os.symlink(t / "victim", t / name)
    return t / name


OUTPUTS = {  # an output path (made from the file name the flag takes) -> what the one line must name
    "an existing file": (lambda t, n: _write(t / n, b"keep me"), "--force"),
    "a folder": (lambda t, n: t, "directory"),
    "/dev/full": (lambda t, n: Path("/dev/full"), "/dev/full"),
    "an unwritable folder": (_unwritable, "ro"),
    "a FIFO": (lambda t, n: _fifo(t, n), "r."),
    "a symlink to a file outside": (_symlink_to_a_victim, "r."),
}
NAMES = {"--html": "r.html", "--json": "r.jsonl", "--out": "r.png"}


@pytest.mark.parametrize("name", list(OUTPUTS))
@pytest.mark.parametrize("flag", ["--html", "--json", "--out"])
def test_hostile_report_output(good, tmp_path, name, flag):
    if name == "an unwritable folder" and os.geteuid() == 0:
        pytest.skip("root writes anywhere")
    make, needle = OUTPUTS[name]
    target = make(tmp_path, NAMES[flag])
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and not stat.S_ISFIFO(p.stat().st_mode)}
    extra = ["--plot", "roofline"] if flag == "--out" else []
    outcome(invoke("report", good[0], *extra, flag, target), needle)
    after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and not stat.S_ISFIFO(p.stat().st_mode)}
    assert after == before, "a refused report changed or left a file"


def test_junit_and_markdown_escape_hostile_cells(good, tmp_path):
    """A variant named like markup reaches `check --format junit` as text, never as XML (a well-formed report)."""
    bad = damaged_csv(good, tmp_path, "variant", "</testcase><x>&\"'")
    base = damaged_csv(good, tmp_path / "b" if (tmp_path / "b").mkdir() is None else None, "variant",
                       "</testcase><x>&\"'")
    res = invoke("check", base, bad, "--format", "junit")
    assert res.exit_code == 0, res.output
    tree = ElementTree.fromstring(res.stdout[res.stdout.index("<"):])
    assert any("</testcase><x>" in (e.get("name") or "") + (e.get("classname") or "") for e in tree.iter())


# -- the Python API ---------------------------------------------------------------------------------------------
def api_more(config: str, good_csv: str, tmp: Path) -> dict:
    bench = lambda **kw: lambda: nnbench.benchmark(config, backend="cpu", frame=False, **kw)  # noqa: E731
    sweep = lambda **kw: lambda: nnbench.run_sweep(config, backend="cpu", load_only=True, **kw)  # noqa: E731
    return {
        "load bytes": lambda: nnbench.load(VECTOR_ADD.encode()),
        "load a folder": lambda: nnbench.load(str(tmp)),
        "load /dev/zero": lambda: nnbench.load("/dev/zero"),
        "load a dict without suite": lambda: nnbench.load({"source": "x.cu"}),
        "load a dict of junk": lambda: nnbench.load({1: 2}),
        "load a dict with a callable source": lambda: nnbench.load({"suite": "kernel", "source": print}),
        "load a nested dict bomb": lambda: nnbench.load(_nested(3000)),
        "benchmark backend unknown": lambda: nnbench.benchmark(config, backend="tpu"),
        "benchmark backend an int": lambda: nnbench.benchmark(config, backend=1),
        "benchmark device text": bench(device="0"),
        "benchmark device a float": bench(device=0.5),
        "benchmark device bool": bench(device=True),
        "benchmark variants unknown": bench(variants=["nosuch"]),
        "benchmark variants of ints": bench(variants=[1]),
        "benchmark params of a list": bench(params={"BLOCK": [256]}),
        "benchmark params unknown": bench(params={"WARP": 2}),
        "benchmark params a string key": bench(params={1: 2}),
        "benchmark problems of strings": bench(problems=[{"N": "100"}]),
        "benchmark problems negative": bench(problems=[{"N": -1}]),
        "benchmark problems unknown axis": bench(problems=[{"M": 100}]),
        "benchmark problems too many": bench(problems=[{"N": 8}] * 100_001),
        "benchmark problems a huge N": bench(problems=[{"N": 10**15}]),
        "benchmark budget zero": bench(budget=0),
        "benchmark budget bool": bench(budget=True),
        "benchmark seed a float": bench(seed=1.5),
        "benchmark seed past 32 bits": bench(seed=2**32),
        "benchmark frame text": lambda: nnbench.benchmark(config, backend="cpu", frame="no"),
        "benchmark config and keywords": lambda: nnbench.benchmark(config, backend="cpu", source="x.cu"),
        "benchmark no config": lambda: nnbench.benchmark(backend="cpu"),
        "benchmark keywords of junk": lambda: nnbench.benchmark(backend="cpu", bogus=1),
        "benchmark reference not callable": lambda: nnbench.benchmark(backend="cpu", suite="kernel",
                                                                      source=str(Path(config).parent / "vector_add.cu"),
                                                                      kernel="vector_add", args=[], reference=5,
                                                                      problems=[{"N": 8}]),
        "run_sweep out a folder": sweep(out=str(tmp), fresh=True),
        "run_sweep out an int": sweep(out=5),
        "run_sweep json an int": sweep(json=5),
        "run_sweep gpus of strings": sweep(gpus=["0"]),
        "run_sweep gpus a dict": sweep(gpus={0: 1}),
        "run_sweep jobs a float": sweep(jobs=1.5),
        "run_sweep replay missing": sweep(replay=str(tmp / "nosuch.csv")),
        "run_sweep events not callable": lambda: nnbench.run_sweep(config, backend="cpu", load_only=True, events=5),
        "run_sweep a list of strings": lambda: nnbench.run_sweep([config], backend="cpu", load_only=True),
        "check tolerance a list": lambda: nnbench.check(good_csv, good_csv, tolerance=[0.05]),
        "check tolerance inf": lambda: nnbench.check(good_csv, good_csv, tolerance=math.inf),
        "check current a folder": lambda: nnbench.check(good_csv, str(tmp)),
        "check current missing": lambda: nnbench.check(good_csv, str(tmp / "nosuch.csv")),
        "check current bytes": lambda: nnbench.check(good_csv, good_csv.encode()),
        "check baseline a dict": lambda: nnbench.check({"a": good_csv}, good_csv),
        "check baseline with a None": lambda: nnbench.check([good_csv, None], good_csv),
        "check allow_missing text": lambda: nnbench.check(good_csv, good_csv, allow_missing="no"),
    }


def _nested(depth):
    d = {}
    node = d
    for _ in range(depth):
        node["suite"] = {}
        node = node["suite"]
    return d


API_MORE = list(api_more("", "", Path()))


@pytest.mark.parametrize("name", API_MORE)
def test_api_misuse(good, tmp_path, name):
    call = api_more(str(kernel(tmp_path)), str(good[0]), tmp_path)[name]
    with pytest.raises(NnbenchError) as caught:
        call()
    assert "\n" not in str(caught.value)


def test_api_valid_calls_are_accepted(good, tmp_path):
    """The campaign's baseline for the API: the same calls with good values work (so each refusal is the value's)."""
    config = str(kernel(tmp_path))
    assert nnbench.load(config)
    rows = nnbench.benchmark(config, backend="cpu", frame=False, problems=[{"N": 64}], budget=0.01, seed=3)
    assert rows and rows[0]["status"] == "REFERENCE"
    # a file against itself is never SLOWER; a noisy CPU run may be UNSTABLE, too noisy to call SAME at 5%
    itself = nnbench.check([str(good[0])], str(good[0]), tolerance=0.05, allow_unstable=True)
    assert itself.passed and {v.verdict for v in itself.verdicts} <= {"SAME", "UNSTABLE"}


if sys.platform != "linux":  # FIFOs, /dev/full and /dev/zero are Linux's
    pytestmark = pytest.mark.skip("the campaign's special files are Linux's")
