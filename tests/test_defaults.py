"""A kernel's own defaults (its `#ifndef NAME / #define NAME value`, through every header it includes)
equal the registry's, so a kernel built by hand, by a script or by ncu runs the variant the tables
name. The host C preprocessor reads the macros: the same text nvcc sees, without a GPU."""

import re
import shutil
import subprocess

import pytest

from nnbench import expr, paths, workloads

CPP = shutil.which("g++") or shutil.which("cpp")


def kernel_macros(source: str) -> dict[str, str]:
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as stub:  # the CUDA headers' macros are not the kernel's: empty stand-ins
        for name in ("cuda.h", "cuda_runtime.h", "cuda_fp16.h", "mma.h"):
            (Path(stub) / name).write_text("")
        out = subprocess.run([CPP, "-E", "-dM", "-x", "c++", f"-I{paths.KERNELS}", "-idirafter", stub,
                              "-D__CUDACC__", str(paths.KERNELS / source)],
                             capture_output=True, text=True, check=True).stdout
    return dict(re.findall(r"^#define (\w+) (.+)$", out, re.MULTILINE))


def value(name: str, macros: dict[str, str], depth: int = 0) -> int:
    """A macro's integer value, other macros substituted (C's `/` on ints is `//`)."""
    text = macros[name]
    for other in sorted(set(re.findall(r"[A-Z_][A-Z0-9_]*", text)) & set(macros), key=len, reverse=True):
        if depth < 8:
            text = re.sub(rf"\b{other}\b", str(value(other, macros, depth + 1)), text)
    return int(expr.evaluate(text.replace("/", "//").replace("////", "//"), {}))


VARIANTS = [v for v in workloads.all_variants() if v.source and v.params]
# Where several variants are named parameter sets of one kernel file (simple / warped-good / warped-bad
# of 01_neuron_per_thread.cu, avg / max of 05_pool.cu), the file's defaults are the first one's.
FIRST = {v.source: v for v in reversed(VARIANTS)}


@pytest.mark.skipif(CPP is None, reason="no host C++ preprocessor (g++) on PATH")
@pytest.mark.parametrize("v", VARIANTS, ids=lambda v: f"{v.workload}/{v.name}")
def test_kernel_defaults_equal_the_registry(v):
    if FIRST[v.source] is not v:
        pytest.skip(f"{v.source} serves several variants; its defaults are {FIRST[v.source].name}'s")
    macros = kernel_macros(v.source)
    text = (paths.KERNELS / v.source).read_text()
    # A parameter the kernel never names is the host's alone (a block size the launch picks).
    wrong = {p.name: (macros.get(p.name), p.default) for p in v.params
             if (p.name in macros or re.search(rf"\b{p.name}\b(?!\s*[,=:)])", _code(text)))
             and (p.name not in macros or value(p.name, macros) != p.default)}
    assert not wrong, f"{v.source}: kernel default (text) vs registry: {wrong}"


def test_the_check_sees_a_wrong_default(tmp_path, monkeypatch):
    """Planted: a copy of the tiled GEMM whose TS default is 16 where the registry says 32."""
    src = (paths.KERNELS / "gemm/02_tiled.cu").read_text()
    planted = tmp_path / "kernels_cu"
    shutil.copytree(paths.KERNELS, planted)
    (planted / "gemm/02_tiled.cu").write_text(re.sub(r"#define TS \d+", "#define TS 16", src))
    monkeypatch.setattr(paths, "KERNELS", planted)
    with pytest.raises(AssertionError, match="TS"):
        test_kernel_defaults_equal_the_registry(workloads.get("gemm", "tiled"))


def _code(text: str) -> str:
    return re.sub(r"//.*", "", text)
