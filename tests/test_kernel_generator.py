"""The generated header kernels_cu/gemm/09_wgmma_n.cuh is exactly what its generator, kept beside it, writes:
regenerating changes nothing, so the header is never edited by hand and the generator never drifts from it."""

import subprocess
import sys

from nnbench import paths

GEMM = paths.KERNELS / "gemm"
GENERATOR = GEMM / "gen_09_wgmma_n.py"
HEADER = GEMM / "09_wgmma_n.cuh"


def test_regenerating_the_wgmma_header_changes_nothing(tmp_path):
    out = tmp_path / HEADER.name
    subprocess.run([sys.executable, str(GENERATOR), str(out)], check=True, capture_output=True, timeout=60)
    fresh, committed = out.read_text().splitlines(), HEADER.read_text().splitlines()
    differing = [i + 1 for i, (a, b) in enumerate(zip(fresh, committed)) if a != b]
    where = differing[:5] or "past the end"
    assert fresh == committed, (f"{HEADER.relative_to(paths.ROOT)} differs from what {GENERATOR.name} writes (lines "
                                f"{where}; {len(fresh)} against {len(committed)} lines): "
                                f"run python3 {GENERATOR.relative_to(paths.ROOT)}")
