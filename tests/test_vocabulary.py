"""One word for a workload: the package's name (gemm, train, conv, kernel) in records, configs and the CLI.

Files written before the rename (a `suite` column, a `suite:` key, rows that carried a registry family name such
as `conv-backward`) still load, resume and compare: read in today's names (results.upgrade_row/upgrade_frame,
yamlnodes.renamed). What is written is only ever today's."""

import csv
import re

import pytest
from click.testing import CliRunner

import nnbench
from nnbench import paths, results, workloads
from nnbench.cli import cli
from nnbench.sweeps import config

BASELINE = paths.ROOT / "results" / "baselines" / "nvidia-h100-80gb-hbm3.csv"
OLD_FAMILIES = ("mlp", "mlp-batched", "conv-backward", "conv-model")


def converted(old, new, edit=lambda row: row):
    """`old` rewritten in today's names: header and values, each cell's text kept."""
    with open(old, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        rows = [edit(results.upgrade_row(r)) for r in reader]
        header = [results.OLD_COLUMNS.get(c, c) for c in reader.fieldnames]
    with open(new, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, header)
        writer.writeheader()
        writer.writerows(rows)
    return new


def test_the_committed_baseline_is_of_the_old_schema():
    """The file the next test reads is one written before the rename: else it would prove nothing."""
    with open(BASELINE, newline="", encoding="utf-8") as f:
        header = next(csv.reader(f))
    assert header[0] == "suite" and "workload" not in header


def test_an_old_baseline_compares_same_against_itself_converted(tmp_path):
    new = converted(BASELINE, tmp_path / "new.csv")
    with open(new, newline="", encoding="utf-8") as f:
        assert next(csv.reader(f))[0] == "workload"
    for base, cur in ((BASELINE, new), (new, BASELINE)):
        got = nnbench.check(base, cur, allow_unstable=True)
        verdicts = {v.verdict for v in got.verdicts}
        assert len(got.verdicts) > 20 and not verdicts & {"MISSING", "NEW", "SLOWER", "FASTER"}, verdicts
        assert {v.workload for v in got.verdicts} == {"gemm", "train", "conv"}


def test_rows_of_an_old_family_name_are_their_workloads_cases(tmp_path):
    """An older row that said `conv-backward` (or `mlp`) is the same case as today's row of `conv` (`train`)."""
    backward = {v.name for v in workloads.variants_of("conv", kinds=("backward",))}

    def family(row):
        if row["workload"] == "conv" and row["variant"] in backward:
            return dict(row, workload="conv-backward")
        return dict(row, workload="mlp") if row["workload"] == "train" else row

    old = converted(BASELINE, tmp_path / "old.csv", family)
    with open(old, newline="", encoding="utf-8") as f:
        families = {r["workload"] for r in csv.DictReader(f)}
    assert {"conv-backward", "mlp"} <= families
    got = nnbench.check(BASELINE, old, allow_unstable=True)
    assert not {v.verdict for v in got.verdicts} & {"MISSING", "NEW"}


def test_a_sweep_config_with_the_old_key_loads_as_today(tmp_path):
    text = (paths.ROOT / "configs" / "gemm_sweep.yaml").read_text()
    assert "\nworkload: gemm" in text
    old = tmp_path / "old.yaml"
    old.write_text(text.replace("\nworkload: gemm", "\nsuite: gemm"))
    assert config.load_config(old)[0].workload_name == "gemm"
    both = tmp_path / "both.yaml"
    both.write_text(text.replace("\nworkload: gemm", "\nworkload: gemm\nsuite: gemm"))
    with pytest.raises(config.ConfigError, match="suite is the old name of workload"):
        config.load_config(both)


def test_every_variant_names_its_package():
    assert {v.workload for v in workloads.all_variants()} <= set(workloads.WORKLOADS)
    for name in workloads.WORKLOADS:
        names = [v.name for v in workloads.variants_of(name)]
        assert len(names) == len(set(names)), f"{name}: a variant's name is not unique in its workload"


def _commands(group, prefix=()):
    for name, cmd in group.commands.items():
        yield (*prefix, name)
        if hasattr(cmd, "commands"):
            yield from _commands(cmd, (*prefix, name))


@pytest.mark.parametrize("command", [(), *_commands(cli)], ids=lambda c: " ".join(c) or "nnbench")
def test_no_help_text_names_a_suite_or_a_family(command):
    out = CliRunner().invoke(cli, [*command, "--help"], terminal_width=200)
    assert out.exit_code == 0, out.output
    text = out.output
    assert "suite" not in text.lower(), text
    # the family names are lowercase words; "MLP", the model the train workload trains, is not one of them
    assert not [f for f in OLD_FAMILIES if re.search(rf"(?<![\w-]){f}(?![\w-])", text)], text
