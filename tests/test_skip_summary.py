"""tests/conftest.py's skip rules, run on a small planted test file in a child pytest: skips are summed up once
per reason, and under CI (CI=true) a missing dependency fails instead of skipping."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

PLANTED = '''
import pytest
from conftest import missing

@pytest.mark.parametrize("i", range(3))
def test_same_reason(i):
    pytest.skip("the same long reason")

def test_needs_a_module():
    pytest.importorskip("no_such_module_for_nnbench")

def test_needs_chromium():
    missing("Chromium is not installed")

@pytest.mark.gpu
def test_on_a_gpu():
    pass
'''


def _pytest(tmp_path: Path, ci: bool) -> subprocess.CompletedProcess:
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_planted.py").write_text(PLANTED)
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -rfE\nmarkers = gpu: a GPU\n")
    env = {k: v for k, v in os.environ.items() if k != "CI"} | ({"CI": "true"} if ci else {})
    # No GPU backend in the child, whatever this machine has: the gpu test's skip is one of the groups.
    env["NNBENCH_TEST_NO_GPU"] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)


def test_skips_are_summed_up_once_per_reason(tmp_path):
    res = _pytest(tmp_path, ci=False)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert "SKIPPED [" not in res.stdout  # no line per skipped test
    assert sum("the same long reason" in ln for ln in lines) == 1, res.stdout
    assert "3 skipped (test_planted.py): the same long reason" in lines, res.stdout
    assert sum("no_such_module_for_nnbench" in ln for ln in lines) == 1, res.stdout
    assert sum("no GPU backend" in ln for ln in lines) == 1, res.stdout


def test_under_ci_a_missing_dependency_fails(tmp_path):
    res = _pytest(tmp_path, ci=True)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "2 failed" in res.stdout and "4 skipped" in res.stdout, res.stdout  # same-reason and gpu still skip
    assert "FAILED" in res.stdout and "no_such_module_for_nnbench" in res.stdout and "Chromium" in res.stdout
