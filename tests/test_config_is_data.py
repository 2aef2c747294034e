"""A config is data: `sweep --dry-run`, `sweep --compile-only`, `check --run`'s planning, `profile --config` and
`nnbench.load()` run no Python but nnbench's own, the standard library's and the installed packages' it imports, on
every shipped config, every kernel config with a reference file beside it, and planted configs whose reference file
(and every module they could name) would leave a marker and raise if it ran.

The commands run in a child process with a profiler on every thread and an audit hook on `exec`, which record each
code object that starts (module bodies included), before nnbench is imported; each code object's file must lie in
nnbench's package, the Python installation or site-packages, never in a config's folder. Code compiled from text
(`<string>`: the methods dataclasses generate) has no file to judge; a planted file run from its text would still
leave its marker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted((ROOT / "configs").glob("*.yaml"))
# kernel configs with a reference file beside them: the user's code that must not run while planning
KERNELS = sorted(p for base in ("tests/kernels", "examples") for p in (ROOT / base).rglob("*.yaml")
                 if (p.parent / "reference.py").exists() and yaml.safe_load(p.read_text()).get("suite") == "kernel")
MARK = "planted-code-ran"

DRIVER = r'''
import json, os, site, sys, sysconfig, threading
from pathlib import Path

current = set()
spawned = []


def prof(frame, event, arg):
    if event == "call":
        current.add(frame.f_code)


def audit(event, args):
    if event == "exec":  # a code object run by exec(): every module body an import runs
        current.add(args[0])
    elif event in ("subprocess.Popen", "os.posix_spawn", "os.exec", "os.system"):
        spawned.append(str(args[0] if event == "os.system" else args[1][0] if event == "subprocess.Popen" else args[0]))


sys.addaudithook(audit)
threading.setprofile(prof)
sys.setprofile(prof)

from click.testing import CliRunner  # noqa: E402

import nnbench  # noqa: E402
from nnbench import api  # noqa: E402
from nnbench.cli import cli  # noqa: E402
from nnbench.profiling import sass  # noqa: E402


class Planned(Exception):
    """check --run has planned its sweep: the run itself (a worker, where the reference may run) is not asked for."""


def planned(*args, **kw):
    raise Planned()


api.run_sweep = planned
sass.cuobjdump = lambda: None  # the instruction mix is a disassembler's work, not Python's: a second each, skipped
out = []
for label, args in json.loads(sys.argv[1]):
    current = set()
    if args[0] == "load":
        try:
            nnbench.load(args[1])
            ended = "loaded"
        except nnbench.NnbenchError as e:
            ended = f"NnbenchError: {e}"
    else:
        res = CliRunner().invoke(cli, args)
        ended = f"exit {res.exit_code}: {type(res.exception).__name__ if res.exception else ''} " \
                f"{(res.output.strip().splitlines() or [''])[-1][:300]}"
    ran, current = current, set()  # the profiler adds to the new set from here on
    out.append({"label": label, "ended": ended, "files": sorted({c.co_filename for c in ran})})
sys.setprofile(None)
threading.setprofile(None)
roots = {Path(nnbench.__file__).resolve().parent}
for scheme in ({}, {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}):
    paths = sysconfig.get_paths(vars=scheme)
    roots |= {Path(paths[k]).resolve() for k in ("stdlib", "platstdlib", "purelib", "platlib") if paths.get(k)}
roots |= {Path(p).resolve() for p in site.getsitepackages() + [site.getusersitepackages()]}
print(json.dumps({"runs": out, "roots": sorted(map(str, roots)), "spawned": sorted(set(spawned)),
                  "python": sys.executable}))
'''


def _plant(folder: Path, name: str, reference: str) -> Path:
    """A copy of examples/vector_add whose reference is `reference`."""
    folder.mkdir(exist_ok=True)
    src = ROOT / "examples" / "vector_add"
    (folder / "vector_add.cu").write_bytes((src / "vector_add.cu").read_bytes())
    text = (src / "vector_add.yaml").read_text().replace("reference: reference:vector_add", f"reference: {reference}")
    assert f"reference: {reference}" in text
    (folder / name).write_text(text)
    return folder / name


def _trap(path: Path, marker: Path) -> None:
    """A Python file that, if anything runs it, leaves `marker` and raises (SystemExit: past `except Exception`)."""
    path.write_text(f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\nraise SystemExit(3)\n\n\n"
                    "def vector_add(a, b, c, n):\n    return a + b\n\n\ndef fn(*args):\n    return args[0]\n")


def _commands(configs: list[Path], kernels: list[Path], tmp: Path) -> list[tuple[str, list[str]]]:
    baseline = ROOT / "docs" / "data" / "figures" / "ci_again.csv"
    todo = []
    for i, cfg in enumerate(configs):
        c = str(cfg)
        todo += [(f"sweep --dry-run {c}", ["sweep", c, "--dry-run"]), (f"nnbench.load({c})", ["load", c]),
                 (f"check --run {c}", ["check", "--run", c, "--baseline", str(baseline), "--out",
                                       str(tmp / f"check-{i}.csv"), "--backend", "cpu"])]
        top = yaml.safe_load(cfg.read_text())
        if "suite" in top and isinstance(top.get("variants"), dict):  # profile takes a sweep config's variant
            variant = next(iter(top["variants"]))
            todo.append((f"profile --config {c}", ["profile", top["suite"], "-v", variant, "--config", c,
                                                   "--backend", "cpu", "--arch", "sm_90"]))
    for cfg in kernels:  # few kernels each: compiled in seconds (the cache keeps them)
        todo.append((f"sweep --compile-only {cfg}", ["sweep", str(cfg), "--compile-only", "--arch", "sm_90"]))
    return todo


def _trace(todo, tmp: Path, extra_path: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(extra_path)]))
    proc = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(todo)], capture_output=True, text=True,
                          cwd=tmp, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _foreign(report: dict) -> dict[str, list[str]]:
    """Per command, the files of code it ran that are neither nnbench's, the installation's nor site-packages'."""
    roots = [Path(r) for r in report["roots"]]
    bad = {}
    for run in report["runs"]:
        files = [f for f in run["files"] if not (f.startswith("<frozen ") or f == "<string>")]
        files = [f for f in files if not any(Path(f).resolve().is_relative_to(r) for r in roots)]
        if files:
            bad[run["label"]] = files
    return bad


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("data")
    folder, on_path = tmp / "planted", tmp / "on_path"
    on_path.mkdir()
    marker = tmp / MARK
    configs = [_plant(folder, "beside.yaml", "reference:vector_add"), _plant(folder, "named.yaml", "evil:fn"),
               _plant(folder, "on_path.yaml", "planted_module:fn"), _plant(folder, "stdlib.yaml", "os:system")]
    for trap in (folder / "reference.py", folder / "evil.py", on_path / "planted_module.py"):
        _trap(trap, marker)
    return tmp, configs, on_path, marker


def test_planning_runs_no_python_but_nnbench_and_its_libraries(planted):
    tmp, planted_configs, on_path, marker = planted
    todo = _commands(SHIPPED + KERNELS + planted_configs, KERNELS + planted_configs[:2], tmp)
    report = _trace(todo, tmp, on_path)
    assert _foreign(report) == {}
    assert not marker.exists()
    # the planted references that name no file of the config's folder are refused in one line, and nothing
    # but nvcc and its tools is started
    ended = {r["label"]: r["ended"] for r in report["runs"]}
    for cfg in planted_configs[2:]:
        assert ended[f"sweep --dry-run {cfg}"].startswith("exit 2:"), ended[f"sweep --dry-run {cfg}"]
    assert all(Path(p).name not in ("python", "python3", Path(report["python"]).name) for p in report["spawned"]), \
        report["spawned"]
    assert len(report["runs"]) == len(todo) and all(r["files"] for r in report["runs"])
    # each command ends in its output, a one-line refusal, or (check --run) the run it plans, never a traceback
    crashed = {k: v for k, v in ended.items() if not v.startswith(("exit 0:", "exit 2: SystemExit", "exit 1: Planned",
                                                                   "loaded", "NnbenchError"))}
    assert crashed == {}
