"""scripts/setup, the README's install step: it installs into the active virtual environment (and refuses where
none is), tries the `gpu` extra only where a GPU and the CUDA toolkit's headers are present, builds PyCUDA against
the toolkit it found, leaves no log behind when pip succeeded, and says in one line what it installed and why.
Run against stub `nvidia-smi`, `nvcc` and `python3` (which records the pip command instead of installing)."""

import os
import subprocess
from pathlib import Path

import pytest

SETUP = Path(__file__).parent.parent / "scripts" / "setup"


def _stub(d: Path, name: str, body: str) -> None:
    p = d / name
    p.write_text(f"#!/bin/sh\n{body}\n")
    p.chmod(0o755)


def _toolkit(root: Path, headers=("cuda.h", "curand.h")) -> Path:
    (root / "bin").mkdir(parents=True)
    _stub(root / "bin", "nvcc", "exit 0")
    (root / "include").mkdir()
    for h in headers:
        (root / "include" / h).write_text("")
    return root


def _run(tmp_path: Path, *, gpu: bool, nvcc: bool, headers=("cuda.h", "curand.h"), pycuda_builds: bool = True,
         extras=(), venv: bool | None = None, env_extra=None):
    """venv None: PYTHON names the stub (the override); True/False: PYTHON unset, python3 says whether a venv is
    active."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "pip-calls"
    fail = "case \"$*\" in *gpu*) exit 1;; esac" if not pycuda_builds else ""
    venv_check = f'case "$1" in -c) exit {0 if venv else 1};; esac' if venv is not None else ""
    # Each pip call is recorded with the nvcc that PyCUDA's build would find first on PATH.
    _stub(bindir, "python3", f'{venv_check}\necho "$* | nvcc=$(command -v nvcc)" >> {calls}\n{fail}')
    _stub(bindir, "nvidia-smi", 'echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: x)"' if gpu else "exit 9")
    root = tmp_path / "cuda"
    path = [str(bindir)]
    if nvcc:
        _toolkit(root, headers)
        path.append(str(root / "bin"))
    env = {"PATH": ":".join([*path, "/usr/bin", "/bin"]), "TMPDIR": str(tmp_path), "CUDA_ROOT": "", "CUDA_HOME": "",
           "CUDA_DEFAULT_ROOT": "", **(env_extra or {})}
    if venv is None:
        env["PYTHON"] = str(bindir / "python3")
    res = subprocess.run(["bash", str(SETUP), *extras], capture_output=True, text=True, env=env, timeout=30)
    lines = calls.read_text().splitlines() if calls.exists() else []
    return res, [ln.split(" | ")[0] for ln in lines], [ln.split(" | nvcc=")[1] for ln in lines]


def _logs(tmp_path: Path) -> list[Path]:
    return sorted(tmp_path.glob("nnbench-setup.*"))


@pytest.mark.parametrize("gpu, nvcc, headers, reason", [
    (False, True, ("cuda.h", "curand.h"), "no NVIDIA GPU"),
    (True, False, (), "no CUDA toolkit (nvcc is not on PATH; or set CUDA_ROOT"),
    (True, True, (), "cuda.h was not found (set CUDA_ROOT"),
    (True, True, ("cuda.h",), "has no cuRAND headers (include/curand.h)"),
])
def test_a_machine_without_gpu_or_toolkit_installs_the_cpu_path_quietly(tmp_path, gpu, nvcc, headers, reason):
    res, calls, _ = _run(tmp_path, gpu=gpu, nvcc=nvcc, headers=headers)
    assert res.returncode == 0, res.stderr
    assert len(calls) == 1 and calls[0].endswith("-e .") and "gpu" not in calls[0]  # PyCUDA never tried
    lines = res.stdout.splitlines()
    assert len(lines) == 1 and "installed the NumPy CPU path" in lines[0] and reason in lines[0], res.stdout
    assert res.stderr == ""
    assert _logs(tmp_path) == []  # pip succeeded: no log left behind


def test_a_gpu_machine_gets_pycuda_and_extras(tmp_path):
    res, calls, nvccs = _run(tmp_path, gpu=True, nvcc=True, extras=("test", "profile"))
    assert res.returncode == 0, res.stderr
    assert calls == ["-m pip install -q --disable-pip-version-check -e .[gpu,test,profile]"]
    assert "installed with PyCUDA for GPU 0: NVIDIA H100" in res.stdout and str(tmp_path / "cuda") in res.stdout
    assert nvccs == [str(tmp_path / "cuda" / "bin" / "nvcc")]
    assert _logs(tmp_path) == []


def test_pycuda_is_built_against_cuda_root_not_the_first_nvcc_on_path(tmp_path):
    """CUDA_ROOT names a toolkit; the nvcc on PATH belongs to another one (or is a wrapper). PyCUDA's build must
    find CUDA_ROOT's nvcc first, or it builds against the other toolkit."""
    chosen = _toolkit(tmp_path / "chosen")
    res, calls, nvccs = _run(tmp_path, gpu=True, nvcc=True, env_extra={"CUDA_ROOT": str(chosen)})
    assert res.returncode == 0, res.stderr
    assert f"CUDA toolkit at {chosen}" in res.stdout
    assert nvccs == [str(chosen / "bin" / "nvcc")]


def test_cuda_home_is_read_where_cuda_root_is_unset(tmp_path):
    chosen = _toolkit(tmp_path / "home")
    res, _, nvccs = _run(tmp_path, gpu=True, nvcc=False, env_extra={"CUDA_HOME": str(chosen)})
    assert res.returncode == 0 and f"CUDA toolkit at {chosen}" in res.stdout, res.stdout + res.stderr
    assert nvccs == [str(chosen / "bin" / "nvcc")]


def test_a_failed_pycuda_build_falls_back_with_its_log_named(tmp_path):
    res, calls, _ = _run(tmp_path, gpu=True, nvcc=True, pycuda_builds=False)
    assert res.returncode == 0 and len(calls) == 2 and calls[1].endswith("-e .")
    assert "building PyCUDA failed (log: " in res.stdout and len(res.stdout.splitlines()) == 1
    log = res.stdout.split("(log: ")[1].split(")")[0]
    assert os.path.exists(log)
    assert _logs(tmp_path) == [Path(log)]  # the failed build's log only; the CPU install's is gone


def test_without_a_virtual_environment_it_refuses_in_one_line(tmp_path):
    res, calls, _ = _run(tmp_path, gpu=False, nvcc=False, venv=False)
    assert res.returncode == 2 and calls == [] and res.stdout == ""
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and "no virtual environment is active" in lines[0] and "python3 -m venv" in lines[0]
    assert "PYTHON=" in lines[0]  # and how to install anyway


def test_in_a_virtual_environment_it_installs_into_its_python(tmp_path):
    res, calls, _ = _run(tmp_path, gpu=False, nvcc=False, venv=True)
    assert res.returncode == 0 and len(calls) == 1, res.stdout + res.stderr


@pytest.mark.parametrize("gpu", [False, True])
def test_the_line_names_the_extras_installed(tmp_path, gpu):
    """`bash scripts/setup plot` on a machine without a GPU said only 'installed the NumPy CPU path': the user who
    asked for plot could not tell that it was installed."""
    res, calls, _ = _run(tmp_path, gpu=gpu, nvcc=True, extras=("test", "plot"))
    assert res.returncode == 0 and calls[-1].endswith(f"-e .[{'gpu,' if gpu else ''}test,plot]"), calls
    assert res.stdout.rstrip().endswith("; with the extras test, plot"), res.stdout
    (tmp_path / "one").mkdir()
    res, _, _ = _run(tmp_path / "one", gpu=gpu, nvcc=True, extras=("plot",))
    assert res.stdout.rstrip().endswith("; with the extra plot"), res.stdout
    (tmp_path / "none").mkdir()
    res, _, _ = _run(tmp_path / "none", gpu=gpu, nvcc=True)
    assert "with the extra" not in res.stdout, res.stdout
