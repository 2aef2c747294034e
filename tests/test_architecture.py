"""The shape of the package, checked cheaply on every run (docs/ARCHITECTURE.md draws it).

Data flows one way: cli -> harness -> workloads -> runtime, and records -> results -> report,
verdict, history. These tests read the source (no imports run), so a change that bends the shape
fails here, with the offending import named, before it can become a habit.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from nnbench import paths, workloads

PACKAGE = paths.ROOT / "nnbench"

# Lowest first. A module may import its own layer or any layer below, never above. Within a layer,
# the no-circle test keeps the order one way.
LAYERS: list[tuple[str, ...]] = [
    ("nnbench.version", "nnbench.errors", "nnbench.paths", "nnbench.safeio", "nnbench.yamlnodes", "nnbench.expr",
     "nnbench.glyphs", "nnbench.nets", "nnbench.memory", "nnbench.options", "nnbench.space", "nnbench.usercode",
     "nnbench.apiargs"),
    # measure times through a backend's events and the backends verify with its error norms: one layer
    # and audit holds the checks that measure's last batch and the sessions apply (nnbench/audit.py)
    ("nnbench.runtime", "nnbench.measure", "nnbench.audit"),
    ("nnbench.registry",),
    ("nnbench.workloads",),
    ("nnbench.harness", "nnbench.sanitize"),
    ("nnbench.results", "nnbench.rawresults"),
    ("nnbench.sweeps", "nnbench.profiling", "nnbench.verdict", "nnbench.history", "nnbench.report"),
    ("nnbench", "nnbench.api", "nnbench.pytest_plugin", "nnbench.cli", "nnbench.__main__",  # nnbench: the facade
     "nnbench.backend_choice"),
]
# What a workload package may import besides itself: the contract, the registry, the timer and
# verifier, the runtime, and the leaf utilities of the first layer.
WORKLOAD_MAY_IMPORT = ("nnbench.workloads.base", "nnbench.registry", "nnbench.measure", "nnbench.audit",
                       "nnbench.runtime",
                       *LAYERS[0])


def module_name(path: Path) -> str:
    rel = path.relative_to(paths.ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Every nnbench module a file imports, at the top or inside a function alike."""
    me = module_name(path)
    pkg = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("nnbench")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            if not base.startswith("nnbench"):
                continue
            for a in node.names:  # `from nnbench import results` imports the module nnbench.results
                sub = f"{base}.{a.name}"
                out.add(sub if (PACKAGE.parent / (sub.replace(".", "/") + ".py")).exists()
                        or (PACKAGE.parent / sub.replace(".", "/")).is_dir() else base)
    out.discard(me)
    return out


def graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in sorted(root.rglob("*.py"))}


def circles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each a circle of imports."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in g:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in g:
        if v not in index:
            visit(v)
    return out


def layer_of(module: str) -> int:
    best, depth = None, -1
    for i, group in enumerate(LAYERS):
        for prefix in group:
            inside = module == prefix or (prefix != "nnbench" and module.startswith(prefix + "."))
            if inside and len(prefix) > depth:
                best, depth = i, len(prefix)
    if best is None:
        raise AssertionError(f"{module} is in no layer of tests/test_architecture.py's LAYERS: place it there")
    return best


def upward(g: dict[str, set[str]]) -> list[str]:
    return [f"{m} (layer {layer_of(m)}) imports {t} (layer {layer_of(t)})"
            for m, targets in g.items() for t in sorted(targets) if layer_of(t) > layer_of(m)]


def foreign_imports_of_workloads(g: dict[str, set[str]]) -> list[str]:
    bad = []
    for m, targets in g.items():
        parts = m.split(".")
        if len(parts) < 3 or parts[:2] != ["nnbench", "workloads"] or parts[2] == "base":
            continue
        own = ".".join(parts[:3])
        for t in sorted(targets):
            if t == own or t.startswith(own + "."):
                continue
            if not any(t == ok or (ok != "nnbench" and t.startswith(ok + ".")) for ok in WORKLOAD_MAY_IMPORT):
                bad.append(f"{m} imports {t}")
    return bad


def test_the_package_has_no_import_circle():
    assert circles(graph()) == []


def test_no_module_imports_a_layer_above_its_own():
    assert upward(graph()) == []


def test_a_workload_package_imports_only_the_contract_the_registry_measure_the_runtime_and_itself():
    assert foreign_imports_of_workloads(graph()) == []


def test_the_checks_see_a_planted_circle_an_upward_import_and_a_workload_reaching_into_another(tmp_path):
    """Each rule above fails on a tree that breaks it (a copy of the package with one import added)."""
    g = graph()
    planted = {k: set(v) for k, v in g.items()}
    planted["nnbench.runtime.device"].add("nnbench.workloads.gemm.session")  # upward, and a circle through gemm
    planted["nnbench.workloads.conv.session"].add("nnbench.workloads.train.mlp")  # one workload into another
    assert circles(planted)
    assert any("nnbench.runtime.device" in line for line in upward(planted))
    assert foreign_imports_of_workloads(planted) == [
        "nnbench.workloads.conv.session imports nnbench.workloads.train.mlp"]
    # and the reader sees imports hidden inside functions
    f = tmp_path / "nnbench" / "probe.py"
    f.parent.mkdir()
    f.write_text("def later():\n    from nnbench.workloads import base\n")
    assert "nnbench.workloads.base" in imports_of_at(f, tmp_path)


def imports_of_at(path: Path, root: Path) -> set[str]:
    """imports_of for a file under another root (the planted probe)."""
    old = paths.ROOT
    try:
        paths.ROOT = root
        return imports_of(path)
    finally:
        paths.ROOT = old


# -- kernel ladders -------------------------------------------------------------------------------
STEP_IN_HEADER = re.compile(r"\bstep (\d+):", re.I)


def ladder_files() -> list[tuple[Path, int]]:
    out = []
    for f in sorted(paths.KERNELS.glob("*/[0-9][0-9]_*.cu")):
        out.append((f, int(f.name[:2])))
    return out


def ladder_disagreements(variants) -> list[str]:
    """A numbered .cu file, the registry's step of every variant built from it, and the step its
    header names must be one number."""
    bad = []
    by_source: dict[str, set[int]] = {}
    for v in variants:
        if v.source and v.source.split("/")[-1][:2].isdigit():
            by_source.setdefault(v.source, set()).add(v.step)
    for f, number in ladder_files():
        rel = f"{f.parent.name}/{f.name}"
        steps = by_source.get(rel, set())
        if steps and steps != {number}:
            bad.append(f"{rel}: file number {number}, registry step(s) {sorted(steps)}")
        title = f.read_text().splitlines()[0]  # "// Step 2: ...", "// Conv step 9: ..."
        said = {int(s) for s in STEP_IN_HEADER.findall(title)}
        if said and number not in said:
            bad.append(f"{rel}: file number {number}, header says step {sorted(said)}")
    return bad


def test_a_ladder_files_number_the_registrys_step_and_its_headers_step_agree():
    assert ladder_disagreements(workloads.all_variants()) == []


def test_the_ladder_check_sees_a_misnumbered_step():
    from dataclasses import replace
    variants = list(workloads.all_variants())
    i = next(i for i, v in enumerate(variants) if v.source == "gemm/02_tiled.cu")
    variants[i] = replace(variants[i], step=3)
    assert ladder_disagreements(variants) == ["gemm/02_tiled.cu: file number 2, registry step(s) [3]"]


# -- test-only defects ------------------------------------------------------------------------------
# A test-only defect is a patch of a copy (tests/mutants.py), never a switch in a shipped kernel. The one
# exception is the planted slowdown of common/plant.cuh, PLANT_SLOWDOWN through NNBENCH_PLANT, which the gate's
# documented figures are reproduced with through the CLI's worker processes (the header says why): its macro
# may appear in that header only, and the kernels call plant_slowdown().
DEFECT_HOOK = re.compile(r"\b(MUTATE_[A-Z0-9_]+|PLANT_[A-Z0-9_]+|PLANTED_[A-Z0-9_]+)\b")
PLANT_HEADER = "common/plant.cuh"


def shipped_defect_hooks(root: Path) -> list[str]:
    return [f"{f.relative_to(root)}: {m}" for f in sorted(root.rglob("*.cu*"))
            for m in sorted(set(DEFECT_HOOK.findall(f.read_text())))
            if not (f.relative_to(root).as_posix() == PLANT_HEADER and m == "PLANT_SLOWDOWN")]


def test_no_test_only_defect_lives_in_a_shipped_kernel():
    assert shipped_defect_hooks(paths.KERNELS) == []


def test_the_defect_check_sees_a_mutate_switch_and_a_plant_outside_its_header(tmp_path):
    (tmp_path / "common").mkdir()
    (tmp_path / PLANT_HEADER).write_text("#ifndef PLANT_SLOWDOWN\n#define PLANT_SLOWDOWN 0\n#endif\n")
    assert shipped_defect_hooks(tmp_path) == []
    (tmp_path / "k.cu").write_text("#ifdef MUTATE_DROP_TAP\n#endif\n#if PLANT_SLOWDOWN\n#endif\n")
    assert shipped_defect_hooks(tmp_path) == ["k.cu: MUTATE_DROP_TAP", "k.cu: PLANT_SLOWDOWN"]


# -- the runtime seam -------------------------------------------------------------------------------
# Modules that read Python's own `ast.Call.func` (a parsed expression's callee), not a kernel's.
READS_PYTHON_AST = ("expr.py",)


def raw_function_reads(root: Path = PACKAGE) -> list[str]:
    """Each `.func` read outside runtime/: the raw PyCUDA Function of a loaded kernel. Every launch goes
    through the backend's `launch` or `bind`, so nothing above the runtime depends on PyCUDA's calls."""
    bad = []
    for f in sorted(root.rglob("*.py")):
        rel = f.relative_to(root)
        if rel.parts[0] == "runtime" or str(rel) in READS_PYTHON_AST:
            continue
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.Attribute) and node.attr == "func":
                bad.append(f"{rel}:{node.lineno}")
    return bad


def test_no_module_outside_the_runtime_reaches_a_kernels_raw_function():
    assert raw_function_reads() == []


def test_the_seam_check_sees_a_planted_raw_function_call(tmp_path):
    (tmp_path / "runtime").mkdir()
    (tmp_path / "runtime" / "cuda.py").write_text("def load(m):\n    return m.get_function('k').func\n")
    (tmp_path / "suite.py").write_text("def run(backend, c):\n    backend.load(c, 'k').func(block=(1, 1, 1))\n")
    assert raw_function_reads(tmp_path) == ["suite.py:2"]
