"""Packaging: the metadata that pip builds (SPDX licence and its files), the vendored assets' licences, the README's
test command being the one .ci/run runs, and the `history` extra leaving numpy and scipy as they are.

The pip checks resolve against the package index (a dry run: nothing is installed); without one they skip, and
under CI (CI=true) they fail."""

import json
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from .conftest import missing

ROOT = Path(__file__).resolve().parent.parent
ASSETS = ROOT / "nnbench" / "assets"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _pip_report(*args: str) -> dict:
    res = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--report", "-", *args],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    if res.returncode != 0:
        missing(f"pip could not resolve {' '.join(args)} (no package index?): {res.stderr.strip()[-300:]}")
    return json.loads(res.stdout)


def licence_of(asset: Path) -> Path:
    """jquery.dataTables.min.js -> jquery.dataTables.LICENSE.txt: the notice beside the vendored file."""
    return asset.with_name(asset.name.split(".min.")[0] + ".LICENSE.txt")


def vendored(folder: Path = ASSETS) -> list[Path]:
    return sorted(p for p in folder.iterdir() if not p.name.endswith(".LICENSE.txt"))


def unlicensed(folder: Path = ASSETS) -> list[str]:
    bad = []
    for asset in vendored(folder):
        notice = licence_of(asset)
        text = notice.read_text() if notice.exists() else ""
        if "Copyright" not in text or "Permission is hereby granted" not in text:
            bad.append(asset.name)
    return bad


def test_each_vendored_asset_has_its_licence():
    assert vendored(), "nnbench/assets/ holds the HTML report's vendored scripts"
    assert unlicensed() == []


def test_the_licence_check_sees_a_vendored_file_without_one(tmp_path):
    for p in ASSETS.iterdir():
        (tmp_path / p.name).write_bytes(p.read_bytes())
    (tmp_path / "chart.min.js").write_text("/* planted: no notice beside it */")
    assert unlicensed(tmp_path) == ["chart.min.js"]


def test_the_readme_test_command_is_the_one_ci_runs():
    setup = (ROOT / "README.md").read_text().split("## Set up", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"^(python -m pip install -e '\.\[[\w,]+\]' && python -m pytest.*)$", setup, re.M)
    assert len(commands) == 1, "the README's Set up names one test command"
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(rf"^{re.escape(commands[0])}$", ci, re.M), f".ci/run does not run `{commands[0]}`"
    assert "history" in commands[0]  # the history tests run, not skip


def test_the_wheel_pip_builds_has_an_spdx_licence_and_ships_the_licences(tmp_path):
    """Built as a user's pip builds it (isolated, with the setuptools that pyproject asks for)."""
    assert isinstance(PYPROJECT["project"]["license"], str)  # the table form is deprecated (PEP 639)
    res = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp_path), str(ROOT)],
                         capture_output=True, text=True, timeout=300)
    if res.returncode != 0:
        missing(f"pip could not build the wheel (no package index for setuptools?): {res.stderr.strip()[-300:]}")
    with zipfile.ZipFile(next(tmp_path.glob("nnbench-*.whl"))) as whl:
        names = whl.namelist()
        meta = whl.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    fields = [ln.split(": ", 1) for ln in meta.splitlines() if ": " in ln]
    assert ["License-Expression", "MIT"] in fields, meta[:800]
    assert not any(k == "License" for k, _ in fields)  # the deprecated free-text field is gone
    shipped = {v for k, v in fields if k == "License-File"}
    assert {"LICENSE", "nnbench/assets/jquery.LICENSE.txt", "nnbench/assets/jquery.dataTables.LICENSE.txt"} <= shipped
    assert any(n.endswith("licenses/LICENSE") for n in names)


def test_the_history_extra_changes_no_installed_numpy_or_scipy():
    """What `pip install '.[history]'` would install here, beside the numpy and scipy already installed: neither is
    among it (apache-otava, the extra's former change-point library, downgraded numpy 2.4 to 2.2)."""
    pytest.importorskip("numpy")
    extra = PYPROJECT["project"]["optional-dependencies"]["history"]
    planned = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in _pip_report(*extra)["install"]}
    assert "numpy" not in planned and "scipy" not in planned, planned
