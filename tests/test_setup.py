"""scripts/setup, the README's install step: it tries the `gpu` extra only where a GPU and the CUDA
toolkit's headers are present, and says in one line what it installed and why. Run against stub
`nvidia-smi`, `nvcc` and `python3` (which records the pip command instead of installing)."""

import os
import subprocess
from pathlib import Path

import pytest

SETUP = Path(__file__).parent.parent / "scripts" / "setup"


def _stub(d: Path, name: str, body: str) -> None:
    p = d / name
    p.write_text(f"#!/bin/sh\n{body}\n")
    p.chmod(0o755)


def _run(tmp_path: Path, *, gpu: bool, nvcc: bool, headers: bool, pycuda_builds: bool = True, extras=()):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "pip-calls"
    fail = "case \"$*\" in *gpu*) exit 1;; esac" if not pycuda_builds else ""
    _stub(bindir, "python3", f'echo "$*" >> {calls}\n{fail}')
    _stub(bindir, "nvidia-smi", 'echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: x)"' if gpu else "exit 9")
    root = tmp_path / "cuda"
    if nvcc:
        (root / "bin").mkdir(parents=True)
        _stub(root / "bin", "nvcc", "exit 0")
        if headers:
            (root / "include").mkdir()
            (root / "include" / "cuda.h").write_text("")
    env = {"PATH": f"{bindir}:{root / 'bin'}:/usr/bin:/bin", "PYTHON": str(bindir / "python3"),
           "TMPDIR": str(tmp_path), "CUDA_ROOT": "", "CUDA_HOME": "", "CUDA_DEFAULT_ROOT": ""}
    res = subprocess.run(["bash", str(SETUP), *extras], capture_output=True, text=True, env=env, timeout=30)
    return res, calls.read_text().splitlines() if calls.exists() else []


@pytest.mark.parametrize("gpu, nvcc, headers, reason", [
    (False, True, True, "no NVIDIA GPU"),
    (True, False, False, "no CUDA toolkit (nvcc is not on PATH)"),
    (True, True, False, "cuda.h was not found"),
])
def test_a_machine_without_gpu_or_toolkit_installs_the_cpu_path_quietly(tmp_path, gpu, nvcc, headers, reason):
    res, calls = _run(tmp_path, gpu=gpu, nvcc=nvcc, headers=headers)
    assert res.returncode == 0, res.stderr
    assert len(calls) == 1 and calls[0].endswith("-e .") and "gpu" not in calls[0]  # PyCUDA never tried
    lines = res.stdout.splitlines()
    assert len(lines) == 1 and "installed the NumPy CPU path" in lines[0] and reason in lines[0], res.stdout
    assert res.stderr == ""


def test_a_gpu_machine_gets_pycuda_and_extras(tmp_path):
    res, calls = _run(tmp_path, gpu=True, nvcc=True, headers=True, extras=("test", "profile"))
    assert res.returncode == 0, res.stderr
    assert calls == ["-m pip install -q --disable-pip-version-check -e .[gpu,test,profile]"]
    assert "installed with PyCUDA for GPU 0: NVIDIA H100" in res.stdout and str(tmp_path / "cuda") in res.stdout


def test_a_failed_pycuda_build_falls_back_with_its_log_named(tmp_path):
    res, calls = _run(tmp_path, gpu=True, nvcc=True, headers=True, pycuda_builds=False)
    assert res.returncode == 0 and len(calls) == 2 and calls[1].endswith("-e .")
    assert "building PyCUDA failed (log: " in res.stdout and len(res.stdout.splitlines()) == 1
    log = res.stdout.split("(log: ")[1].split(")")[0]
    assert os.path.exists(log)
