"""What made a result, as part of its key: the kernel's source with every header it reaches, the compile
flags, nnbench's version and the driver (`digest`), and the repository and commit of the kernel's own
source (`source_commit`): a user's kernel is recorded under the user's commit, never nnbench's.

A resumed sweep counts a case as done only where its last row carries the digest the case has now, so
editing a kernel or a header it includes, upgrading the driver or nnbench, runs its cases again; the case's
identity for the gate (results.case_key) stays without it, so a baseline and a changed kernel still compare.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from functools import lru_cache
from pathlib import Path

from nnbench import paths
from nnbench.runtime.compile import BASE_FLAGS, planted, source_hash
from nnbench.version import __version__

DIGEST_CHARS = 16  # 64 bits: a collision between two edits of one kernel is not a practical worry


def source_path(variant) -> Path | None:
    """The variant's .cu file (a built-in's is under kernels_cu/, a user's is absolute), or None (NumPy, vendors)."""
    src = getattr(variant, "source", None)
    if not src:
        return None
    p = Path(src)
    return p if p.is_absolute() else paths.KERNELS / p


def digest(variant, env: dict) -> str:
    """The provenance of a row of `variant` (None for a vendor row) in an environment `env` (results.environment's
    keys): sha256 over the source closure's bytes, the compile flags (planted defects included), nnbench's
    version, the driver, CUDA, nvcc and the compute capability; DIGEST_CHARS hex digits."""
    src = source_path(variant)
    h = hashlib.sha256()
    if src is not None:
        h.update(_closure(src, tuple(getattr(variant, "includes", ()) or ())).encode())
    h.update(repr((BASE_FLAGS, planted(), __version__, *(str(env.get(k) or "") for k in ("driver", "cuda", "nvcc",
                                                                                           "cc")))).encode())
    return h.hexdigest()[:DIGEST_CHARS]


def _closure(src: Path, includes: tuple[str, ...]) -> str:
    # read anew on every call (a few files of kilobytes): a kernel edited between two calls of one process (the
    # Python API in a notebook) must give another digest
    try:
        return source_hash(src, includes)
    except OSError:
        return f"unreadable:{src}"


def source_commit(folder: str, contents: str = "") -> tuple[str, str]:
    """_source_commit, asked again only where the sources (`contents`: their digest) or git's HEAD or index
    changed: a sweep asks once per row, and three git calls a row would cost seconds."""
    return _source_commit(folder, contents, _git_state(Path(folder)))


def _git_state(folder: Path) -> tuple:
    """The times of git's HEAD and index of the work tree holding `folder` (a commit or an add moves them)."""
    for d in (folder, *folder.parents):
        git = d / ".git"
        if git.exists():
            return tuple(_mtime(p) for p in (git / "HEAD", git / "index", git)) if git.is_dir() else (_mtime(git),)
    return ()


def _mtime(p: Path) -> int:
    try:
        return p.stat().st_mtime_ns
    except OSError:
        return 0


@lru_cache(maxsize=64)
def _source_commit(folder: str, _contents: str, _state: tuple) -> tuple[str, str]:
    """(commit, repository) of the git work tree holding `folder`: HEAD's short SHA with -dirty where
    tracked files changed, and the work tree's top folder; ("", "") outside any repository (never
    nnbench's own commit, unless the folder is in nnbench's checkout)."""
    env = dict(os.environ, GIT_OPTIONAL_LOCKS="0")  # reading must never write the user's index

    def git(*args: str) -> str:
        out = subprocess.run(["git", "-C", folder, *args], capture_output=True, text=True, timeout=5, env=env)
        return out.stdout.strip() if out.returncode == 0 else ""
    try:
        sha = git("rev-parse", "--short=12", "HEAD")
        if not sha:
            return "", ""
        dirty = git("status", "--porcelain", "--untracked-files=no")
        return sha + ("-dirty" if dirty else ""), git("rev-parse", "--show-toplevel")
    except (OSError, subprocess.SubprocessError):
        return "", ""


def stamp(rec: dict, variant, env: dict) -> dict:
    """`rec` with its provenance; a kernel outside nnbench's kernels_cu/ (a user's) gets its own repository's
    commit in `git_sha` and the repository in `source_repo`, in place of nnbench's."""
    rec["provenance"] = digest(variant, env)
    src = source_path(variant)
    if src is not None and not src.resolve().is_relative_to(paths.KERNELS.resolve()):
        rec["git_sha"], rec["source_repo"] = source_commit(str(src.resolve().parent), rec["provenance"])
    return rec
