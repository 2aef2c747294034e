"""The docs run: every example in every command's `--help` (a help line that starts with `nnbench `) and every
`nnbench ...` line in README.md's code blocks runs here and exits 0, in its no-GPU form; and docs/KERNEL_YAML.md
documents exactly the keys the kernel-config parser accepts.

The no-GPU form of an example (`no_gpu_form`): a trailing `# comment` and a shell redirection are dropped;
`sweep` gets `--dry-run` (the plan, no GPU) unless it asks for `--compile-only`; a command that takes `--backend`
gets `--backend cpu` unless it names a backend. What cannot run here even so is in CANNOT_RUN_HERE, each with its
reason; any other failure fails the test."""

from __future__ import annotations

import re
import subprocess
import sys

import click
import pytest

from nnbench import paths
from nnbench.cli import cli
from nnbench.workloads.kernel import session as kernel

ROOT = paths.ROOT

# Examples that cannot run on a machine without a GPU in any form, or that name files a user makes first.
CANNOT_RUN_HERE = {
    "--ncu": "Nsight Compute profiles a kernel on a GPU",
    "--split": "a split times the case's parts on a GPU",
    "--gpus": "runs one worker or MPI rank per GPU",
    "--compare torch": "PyTorch's rows run on the GPU",
    "batched-cublas": "cuBLAS runs on the GPU",
    "--mpi": "one sweep worker per MPI rank, each on its GPU",
    "…": "names a file of the user's own runs (results/ci-….csv)",
    "CONFIG": "a placeholder for the user's config",
    "results/ci": "the user's CI results file, written by `nnbench check --run configs/ci.yaml` on a GPU",
    "results/a.csv": "the user's own results files",
    "base.csv": "the user's own results files",
    "postgresql://": "a PostgreSQL server of the user's",
    "--size 4096": "the full ladder at 4096³ takes minutes on the NumPy path",
    "history show": "reads the history database that `nnbench history record` makes first",
    "--baseline results/baselines/nvidia-h100": "checks against the H100's committed baseline: every case needs "
                                                 "that GPU",
}


def help_examples() -> list[str]:
    found = []

    def walk(cmd, path):
        text = cmd.get_help(click.Context(cmd, info_name=" ".join(path)))
        found.extend(ln.strip() for ln in text.splitlines() if ln.strip().startswith("nnbench "))
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, [*path, name])

    walk(cli, ["nnbench"])
    return found


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    found = []
    for block in re.findall(r"```(?:bash|sh|console)?\n(.*?)```", text, re.S):
        for ln in block.splitlines():
            ln = ln.strip().split(" && ")[-1]  # `bash scripts/setup && nnbench gemm …`: the nnbench part
            if ln.startswith("nnbench "):
                found.append(ln)
    return found


def reason_it_cannot_run(example: str) -> str | None:
    return next((why for needle, why in CANNOT_RUN_HERE.items() if needle in example), None)


def no_gpu_form(example: str) -> list[str]:
    line = re.split(r"\s+#\s", example)[0]
    line = re.split(r"\s+>>?\s", line)[0]
    args = line.split()[1:]
    args = [a.strip("'\"") for a in args]
    runs_kernels = args[0] in ("gemm", "train", "conv", "profile") or (args[0] == "check" and "--run" in args)
    if args[0] == "sweep" and "--compile-only" not in args and "--dry-run" not in args:
        args.append("--dry-run")
    elif runs_kernels and "--backend" not in args:
        args += ["--backend", "cpu"]
    return args


EXAMPLES = sorted(set(help_examples()) | set(readme_commands()))


def test_the_examples_are_found():
    assert len(help_examples()) >= 10 and any("gemm" in c for c in readme_commands())


@pytest.mark.parametrize("example", EXAMPLES)
def test_each_documented_command_runs(example):
    why = reason_it_cannot_run(example)
    if why:
        pytest.skip(f"cannot run without a GPU or the user's files: {why}")
    args = [a for arg in no_gpu_form(example) for a in shell_glob(arg)]
    before = set(paths.RESULTS.glob("*-cpu-*")) if paths.RESULTS.is_dir() else set()
    res = subprocess.run([sys.executable, "-m", "nnbench", *args], capture_output=True, text=True, cwd=ROOT,
                         timeout=300)
    for made in ("roofline.png", "train.png", "report.html"):  # a documented --out lands where the user stands
        (ROOT / made).unlink(missing_ok=True)
    # Without --csv a command's CPU rows go to the checkout's results/ as a new file; the test's runs are not results
    for made in (set(paths.RESULTS.glob("*-cpu-*")) if paths.RESULTS.is_dir() else set()) - before:
        made.unlink(missing_ok=True)
    assert res.returncode == 0, f"`nnbench {' '.join(args)}` (from `{example}`) exited {res.returncode}:\n" \
                                f"{(res.stdout + res.stderr)[-2000:]}"


def shell_glob(arg: str) -> list[str]:
    """A pattern as the user's shell expands it, in the checkout (`docs/data/figures/ladder_*.csv`)."""
    import glob
    if not any(c in arg for c in "*?["):
        return [arg]
    return sorted(glob.glob(arg, root_dir=ROOT)) or [arg]


def test_the_no_gpu_form_rule():
    assert no_gpu_form("nnbench sweep configs/gemm_sweep.yaml") == ["sweep", "configs/gemm_sweep.yaml", "--dry-run"]
    assert no_gpu_form("nnbench gemm --ts 32 --wpt 8          # steps 2 and 3") == \
        ["gemm", "--ts", "32", "--wpt", "8", "--backend", "cpu"]
    assert no_gpu_form("nnbench check a.csv b.csv --format markdown >> \"$GITHUB_STEP_SUMMARY\"") == \
        ["check", "a.csv", "b.csv", "--format", "markdown"]


# -- docs/KERNEL_YAML.md against nnbench/workloads/kernel/session.py's tables ----------------------------------------
def documented(section: str) -> list[str]:
    text = (ROOT / "docs" / "KERNEL_YAML.md").read_text()
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `(\w+)` \|", body, re.M)


@pytest.mark.parametrize("section, keys", [("Top level", kernel.TOP_KEYS), ("A variant", kernel.VARIANT_KEYS),
                                           ("An argument", kernel.ARG_KEYS)])
def test_kernel_yaml_documents_every_key_the_parser_accepts(section, keys):
    doc = documented(section)
    assert sorted(doc) == sorted(keys), f"{section}: undocumented {sorted(set(keys) - set(doc))}, " \
                                        f"documented but not accepted {sorted(set(doc) - set(keys))}"


def test_kernel_yaml_lists_the_dtypes_and_init_kinds():
    text = (ROOT / "docs" / "KERNEL_YAML.md").read_text()

    def listed(label):
        return re.findall(r"`(\w+)`", text.split(f"{label}: ", 1)[1].split("\n\n", 1)[0])

    assert listed("Array dtypes") == kernel.ARRAYS
    assert sorted(listed("Scalar dtypes")) == sorted(kernel.SCALARS)
    assert [k for k in listed("`init` kinds") if k in kernel.INITS or k not in ("mean", "std", "low", "high")] \
        == kernel.INITS
