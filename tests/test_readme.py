"""The README's ladder table is the registry's: every GEMM step with a kernel file has a row naming
its step and file, and every row names a step and file the registry has."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nnbench import paths, workloads

README = paths.ROOT / "README.md"


def ladder_rows(text: str) -> set[tuple[int, str]]:
    """(step, file) of each row of the table under '## The GEMM ladder'."""
    section = text.split("## The GEMM ladder", 1)[1].split("\n## ", 1)[0]
    return {(int(m.group(1)), m.group(2)) for m in re.finditer(r"^\| (\d+) \| `([\w.]+)` \|", section, re.M)}


def ladder_mismatch(text: str) -> str | None:
    """What the README's ladder table and the registry disagree on, or None."""
    rows = ladder_rows(text)
    want = {(v.step, Path(v.source).name) for v in workloads.variants_of("gemm") if v.source}
    if rows == want:
        return None
    return f"README has {sorted(rows - want)} that the registry lacks; lacks {sorted(want - rows)}"


def test_the_ladder_table_matches_the_registry():
    assert ladder_mismatch(README.read_text()) is None


def test_the_check_sees_a_missing_step():
    """The comparison the test above makes, on a README with step 8's row planted out: it must name the step."""
    text = README.read_text()
    planted = re.sub(r"^\| 8 \| `08_tf32x3.cu` \|.*\n", "", text, flags=re.M)
    assert planted != text, "the planted defect did not apply: step 8's row is not where the test looks"
    assert "lacks [(8, '08_tf32x3.cu')]" in (ladder_mismatch(planted) or "")


def readme_mix_header(text: str) -> str | None:
    """The header row of the instruction-mix table pasted in the README's profiling section."""
    section = text.split("## Profiling", 1)[1].split("\n## ", 1)[0]
    return next((ln.rstrip() for ln in section.splitlines() if ln.startswith("┃kernel ┃ where")), None)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
def test_the_pasted_instruction_mix_has_the_columns_profile_prints():
    """Compiled for sm_90 without a GPU, the tiled step's table is the one the README shows; its columns at least
    must be today's (the figures follow the toolkit's SASS)."""
    out = subprocess.run([sys.executable, "-m", "nnbench", "profile", "gemm", "-v", "tiled", "--ts", "32",
                          "--backend", "cpu", "--arch", "sm_90"], capture_output=True, text=True, cwd=paths.ROOT,
                         env=dict(os.environ, COLUMNS="400"), timeout=300)
    if out.returncode == 0 and "instruction mix" not in out.stdout:
        pytest.skip("no cuobjdump here (the `profile` extra or the CUDA toolkit has it): no instruction mix")
    printed = next((ln.rstrip() for ln in out.stdout.splitlines() if ln.startswith("┃kernel ┃ where")), None)
    assert printed is not None, out.stdout + out.stderr
    assert readme_mix_header(README.read_text()) == printed
