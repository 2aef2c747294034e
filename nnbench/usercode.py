"""The one place nnbench runs a user's Python: a kernel config's reference function.

A config, its CSVs, JSON and .npy files are data, and may come from a pull request. The reference
is code, so it is treated as such:
- It names a Python file, never an importable module: `module:function` is `module.py` in the
  config's own folder (dots are folders), and `PATH.py:function` a file named by its path
  (relative to the config's folder). Nothing is imported from the Python path, so `os:system` or
  `pickle:loads` name no file and are refused; a file of the Python installation itself is refused too.
- Loading a config only reads the file: it must parse and define the function at its top level
  (`ast`, which executes nothing). `--dry-run`, `--compile-only`, `nnbench.load()` and the gate
  never run it.
- It runs only where a case runs (the sweep's worker, under the watchdog), and every way it can end
  that is not a return (any exception, SystemExit, KeyboardInterrupt) is one NnbenchError naming the
  config's `reference` key, which the case records as its ERROR.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import re
import site
import sys
import sysconfig
from pathlib import Path

from nnbench.errors import NnbenchError

FUNCTION = re.compile(r"[A-Za-z_]\w*")
MODULE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
FORMS = "module:function (module.py in the config's folder) or PATH.py:function (relative to the config's folder)"


def _installation() -> list[Path]:
    """The Python installation's own folders, where importable modules live: the standard library and
    site-packages (a venv's and its base's)."""
    found = set()
    for scheme_vars in ({}, {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}):
        paths = sysconfig.get_paths(vars=scheme_vars)
        found |= {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if paths.get(k)}
    found |= set(site.getsitepackages()) | {site.getusersitepackages()}
    return [Path(p).resolve() for p in found if len(Path(p).parts) > 2]


def resolve(text: str, here: Path) -> tuple[Path, str]:
    """`text` (a config's `reference:`) as (file, function), checked without running anything; raises
    NnbenchError with the problem (the caller adds file, line and key)."""
    target, sep, name = text.rpartition(":")
    if not sep or not target or not FUNCTION.fullmatch(name):
        raise NnbenchError(f"{text!r} is not {FORMS}")
    if target.endswith(".py") or "/" in target:
        if not target.endswith(".py"):
            raise NnbenchError(f"{target!r} is not a .py file; give {FORMS}")
        file = here / target
    elif MODULE.fullmatch(target):
        file = here / (target.replace(".", "/") + ".py")
    else:
        raise NnbenchError(f"{text!r} is not {FORMS}")
    try:
        file = file.resolve()
        found = file.is_file()
    except (OSError, ValueError, RuntimeError):  # a NUL byte, a name too long, a symlink loop (RuntimeError <3.13)
        found = False
    if not found:
        raise NnbenchError(f"{text!r} names no file: {file} does not exist; a reference is a function in your own "
                           f"Python file, never an importable module; give {FORMS}")
    inside = next((d for d in _installation() if file.is_relative_to(d)), None)
    if inside is not None:
        raise NnbenchError(f"{text!r}: {file} belongs to the Python installation ({inside}); a reference is a "
                           "function in your own Python file beside the config")
    try:
        source = file.read_bytes().decode("utf-8")
        tree = ast.parse(source, filename=str(file))
    except OSError as e:
        raise NnbenchError(f"{file}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise NnbenchError(f"{file}: not UTF-8 text (byte {e.start}); a reference is a Python file") from None
    except (SyntaxError, ValueError) as e:
        line = f":{e.lineno}" if getattr(e, "lineno", None) else ""
        raise NnbenchError(f"{file}{line}: not valid Python: {getattr(e, 'msg', None) or e}") from None
    defined = top_level_names(tree.body)
    if name not in defined:
        raise NnbenchError(f"{text!r}: {file.name} defines no {name!r} at its top level; it defines "
                           f"{', '.join(sorted(defined)) or '(nothing)'}")
    return file, name


def top_level_names(body: list[ast.stmt]) -> set[str]:
    """The names a module's top level binds (def, class, assignment, import), inside if/try blocks too."""
    out: set[str] = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            for block in ("body", "orelse", "finalbody"):
                out |= top_level_names(getattr(node, block, []))
            for handler in getattr(node, "handlers", []):
                out |= top_level_names(handler.body)
    return out


def function(file: str | Path, name: str, what: str):
    """Load `file` (under a name of its own, by path and content, so two configs' reference.py never meet
    in sys.modules, and an edited one is loaded anew) and return its `name`. Runs the file's code: only a
    case calls this. `what` prefixes each message (the config's file, line and key)."""
    file = Path(file)
    try:
        data = file.read_bytes()
    except OSError as e:
        raise NnbenchError(f"{what}: cannot read {file}: {e.strerror or e}") from None
    key = f"_nnbench_reference_{hashlib.sha256(str(file).encode() + data).hexdigest()[:16]}"
    mod = sys.modules.get(key)
    if mod is None:
        loader = importlib.util.spec_from_file_location(key, file)
        mod = importlib.util.module_from_spec(loader)
        try:
            loader.loader.exec_module(mod)
        except BaseException as e:  # noqa: BLE001 - the user's code: SystemExit and Ctrl-C included, one line
            raise NnbenchError(f"{what}: loading {file.name} raised {ended(e)}") from None
        sys.modules[key] = mod
    fn = getattr(mod, name, None)
    if not callable(fn):
        raise NnbenchError(f"{what}: {file.name} has no function {name!r} once loaded")
    return fn


def call(fn, args: list, what: str):
    """fn(*args), with every way it can end other than a return as one NnbenchError."""
    try:
        return fn(*args)
    except BaseException as e:  # noqa: BLE001 - the user's code: SystemExit and Ctrl-C included, one line
        raise NnbenchError(f"{what} raised {ended(e)}") from None


def ended(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:300]}" if text else type(e).__name__
