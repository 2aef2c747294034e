"""Property-based bad input (hypothesis): generated option values and generated sweep configs.

The property, for every generated bad input: exit code 2, exactly one line on stderr starting
`nnbench: error:`, nothing on stdout, no traceback, and no file created or changed. Generated
configs may happen to be valid; those must exit 0 from --dry-run, and every other one must meet
the property. Examples are bounded so the file runs in well under a minute on CI's two cores.
"""

import hashlib
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from nnbench import paths
from nnbench.cli import cli

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

FAST = settings(max_examples=150, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

# Values no numeric option takes: non-finite spellings, words, blanks.
NON_FINITE = st.sampled_from(["nan", "NaN", "-nan", "inf", "-inf", "+inf", "Infinity", "-Infinity", "1e999",
                              "-1e999"])
WORDS = st.text(alphabet=st.characters(whitelist_categories=("Lu", "Ll")), min_size=0, max_size=8)
BLANK = st.sampled_from(["", " ", "\t"])
NEGATIVE = st.one_of(st.integers(max_value=-1).map(str), st.floats(max_value=-1e-9, allow_nan=False,
                                                                   allow_infinity=False).map(repr))
HUGE_INT = st.integers(min_value=2**64, max_value=2**200).map(str)

CPU = ["--backend", "cpu"]
# (command prefix, option, what else is bad for it besides NON_FINITE / WORDS / BLANK)
OPTIONS = [
    (["gemm", *CPU], "--budget", NEGATIVE), (["gemm", *CPU], "--rtol", NEGATIVE),
    (["gemm", *CPU], "--seed", NEGATIVE), (["gemm", *CPU], "--seed", HUGE_INT),
    (["gemm", *CPU], "--size", NEGATIVE), (["gemm", *CPU], "--size", HUGE_INT),
    (["gemm", *CPU, "--n", "8", "--k", "8"], "--m", NEGATIVE), (["gemm", *CPU], "--ts", HUGE_INT),
    (["train", *CPU, "--net", "1"], "--rate", NEGATIVE), (["train", *CPU, "--net", "1"], "--momentum", NEGATIVE),
    (["train", *CPU, "--net", "1"], "--tolerance", NEGATIVE), (["train", *CPU, "--net", "1"], "--init-scale", NEGATIVE),
    (["train", *CPU, "--net", "1"], "--seed", NEGATIVE), (["train", *CPU, "--net", "1"], "--max-iterations", NEGATIVE),
    (["train", *CPU, "--net", "1"], "--batch", NEGATIVE), (["train", *CPU], "--net", HUGE_INT),
    (["train", *CPU], "--layers", NEGATIVE), (["train", *CPU, "--net", "1"], "--encoding", NEGATIVE),
    (["conv", *CPU], "--seed", NEGATIVE), (["conv", *CPU], "--budget", NEGATIVE),
    (["conv", *CPU, "--c", "1", "--h", "5", "--w", "5", "--k", "1", "--r", "3"], "--n", NEGATIVE),
    (["conv", *CPU, "--n", "1", "--c", "1", "--h", "5", "--w", "5", "--k", "1", "--r", "3"], "--stride", NEGATIVE),
    (["sweep", "configs/ci.yaml", *CPU], "--watchdog", NEGATIVE),
    (["sweep", "configs/ci.yaml", *CPU], "--jobs", NEGATIVE),
    (["check", "results/baselines/nvidia-h100-80gb-hbm3.csv", "results/baselines/nvidia-h100-80gb-hbm3.csv"],
     "--tolerance", NEGATIVE),
    (["profile", "gemm", "-v", "tiled", *CPU], "--m", NEGATIVE), (["profile", "mlp", "-v", "batched", *CPU],
                                                                  "--batch", NEGATIVE),
]
CSV_TAKERS = {"gemm", "train", "conv"}


def snapshot(*folders: Path) -> dict[str, str]:
    out = {}
    for folder in folders:
        for p in folder.rglob("*"):
            if p.is_file() and "__pycache__" not in p.parts:
                out[str(p)] = hashlib.sha1(p.read_bytes()).hexdigest()
    return out


def assert_refused(res, label):
    assert res.exit_code == 2, (label, res.exit_code, res.output)
    assert res.exception is None or isinstance(res.exception, SystemExit), (label, res.exception)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("nnbench: error:"), (label, res.stderr)
    assert not res.stdout.strip(), (label, res.stdout)
    assert "Traceback" not in res.output


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    return tmp_path_factory.mktemp("bad")


@FAST
@given(case=st.sampled_from(OPTIONS), data=st.data())
def test_every_numeric_option_refuses_bad_values(scratch, case, data):
    prefix, option, extra = case
    value = data.draw(st.one_of(NON_FINITE, WORDS, BLANK, extra), label="value")
    if option in ("--net",) and value.strip() in ("1", "2", "3", "4", "5", "6", "7", "8"):
        return
    args = [*prefix, option, value]
    csv_path = scratch / "never.csv"
    if prefix[0] in CSV_TAKERS:
        args += ["--csv", str(csv_path)]
    before = snapshot(paths.RESULTS, scratch)
    res = CliRunner().invoke(cli, args)
    assert_refused(res, args)
    assert snapshot(paths.RESULTS, scratch) == before and not csv_path.exists()


# -- generated sweep configs --------------------------------------------------------------------------
LEAVES = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
                   st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
                   st.sampled_from(["ts % wpt == 0", "log2(ts - ts) > 0", "ts ** 64 ** 64 > 0", "min()", "ts + 1",
                                    "(1, 2) < 3", "cdiv(ts, 0) > 1", "__import__('os')", "ts.__class__", "5",
                                    "coarsened", "tiled", "gemm", "square", "mlp"]))
VALUES = st.recursive(LEAVES, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                      st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                      max_leaves=8)
BASE = {"name": "prop", "workload": "gemm", "shapes": [[9, 8, 7]], "timing": {"budget": 0.01},
        "variants": {"coarsened": {"axes": {"ts": [16, 32], "wpt": [1, 2]}, "restrict": ["ts % wpt == 0"]}}}
SPOTS = [("name",), ("workload",), ("shapes",), ("timing",), ("timing", "budget"), ("timing", "rtol"), ("seed",),
         ("variants",), ("variants", "coarsened"), ("variants", "coarsened", "axes"),
         ("variants", "coarsened", "axes", "ts"), ("variants", "coarsened", "restrict"), ("baseline",), ("cublas",),
         ("bogus",)]


def mutate(spot, value, base=None):
    """A copy of `base` (default BASE, a sweep config) with the value at `spot` (a path of keys) replaced."""
    cfg = yaml.safe_load(yaml.safe_dump(BASE if base is None else base))
    node = cfg
    for key in spot[:-1]:
        node = node[key]
    node[spot[-1]] = value
    return cfg


@FAST
@given(spot=st.sampled_from(SPOTS), value=VALUES)
def test_generated_configs_load_or_give_one_line(scratch, spot, value):
    path = scratch / "gen.yaml"
    path.write_text(yaml.safe_dump(mutate(spot, value), allow_unicode=True))
    before = snapshot(paths.RESULTS)
    res = CliRunner().invoke(cli, ["sweep", str(path), "--dry-run"])
    if res.exit_code != 0:
        assert_refused(res, (spot, value))
        assert str(path) in res.stderr
    assert snapshot(paths.RESULTS) == before


@settings(max_examples=80, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(blob=st.binary(min_size=1, max_size=200))
def test_generated_bytes_as_a_config(scratch, blob):
    path = scratch / "blob.yaml"
    path.write_bytes(blob)
    res = CliRunner().invoke(cli, ["sweep", str(path), "--dry-run"])
    assert_refused(res, blob)


def test_the_property_catches_a_planted_silent_acceptance(monkeypatch):
    """The property is not vacuous: with NaN let through (the defect issue 26 found), it fails."""
    from nnbench import options
    monkeypatch.setattr(options.Finite, "convert", lambda self, value, param, ctx: float(value))
    res = CliRunner().invoke(cli, ["sweep", "configs/ci.yaml", "--watchdog", "nan", "--dry-run"])
    with pytest.raises(AssertionError):
        assert_refused(res, "planted")
