"""Result files that survive two writers, a full disk and a kill: how every nnbench writer opens a file.

- A new file is created exclusively (O_CREAT | O_EXCL), so two processes can never both believe
  they made it; a default name that is taken is not reused: the next free `-N` suffix is.
- A resumed file is opened with O_APPEND, so each row lands at the end whatever else moved it.
- Every writer holds an advisory lock (flock) on its file for as long as it writes. A second
  writer does not wait behind the first (a sweep can run for hours): it refuses at once, with a
  line that names the file. The lock is taken before a resume reads which cases are done, so two
  resumes can never both run the same case.
- Overwriting needs `force`, and even then a file that another nnbench is writing is refused
  before anything is truncated.
- Any OS error (no space, read-only folder, a path that is a device) is one NnbenchError naming
  the path, never a traceback.
"""

from __future__ import annotations

import fcntl
import os
import stat
from pathlib import Path

from nnbench.errors import NnbenchError

NEW, APPEND, FORCE, UNIQUE = "new", "append", "force", "unique"
MAX_SUFFIX = 1000  # results/<name>-1.csv ... -999.csv: past that, something is wrong with the folder


def os_problem(path, e: OSError, doing: str = "cannot write") -> NnbenchError:
    """One line for an OS error on `path`: what failed, where, and the system's reason."""
    return NnbenchError(f"{path}: {doing}: {e.strerror or e}")


def open_locked(path: Path, mode: str = NEW, flag: str | None = "--force") -> tuple[Path, int]:
    """Open `path` for writing under an exclusive advisory lock; return (path actually opened, fd).

    NEW: the file must not exist. UNIQUE: `path` or, if taken, `path-1`, `path-2`, ... (default
    names). APPEND: add to the end of an existing (or new) file. FORCE: replace an existing file,
    truncated only once the lock is held. `flag`: the option that replaces a taken file, None where the
    command has none (the refusal then names only what it accepts)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise os_problem(path.parent, e, "cannot create the folder") from None
    if mode == UNIQUE:
        for i in range(MAX_SUFFIX):
            candidate = path if i == 0 else path.with_name(f"{path.stem}-{i}{path.suffix}")
            try:
                fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                continue
            except OSError as e:
                raise os_problem(candidate, e) from None
            _lock(candidate, fd)
            return candidate, fd
        raise NnbenchError(f"{path}: {MAX_SUFFIX} files of this name already exist; clean up {path.parent}")
    flags = {NEW: os.O_WRONLY | os.O_CREAT | os.O_EXCL, APPEND: os.O_WRONLY | os.O_CREAT | os.O_APPEND,
             FORCE: os.O_WRONLY | os.O_CREAT}[mode]
    try:
        fd = os.open(path, flags, 0o644)
    except FileExistsError:
        remedy = f"name a new file, or pass {flag} to replace it" if flag else "name a new file"
        raise NnbenchError(f"{path}: the file exists and nnbench never overwrites a result file; {remedy}") from None
    except IsADirectoryError:
        raise NnbenchError(f"{path}: is a folder; name a file") from None
    except OSError as e:
        raise os_problem(path, e, "cannot open for writing") from None
    _lock(path, fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # /dev/full, a FIFO: never a result file
        os.close(fd)
        raise NnbenchError(f"{path}: not a regular file; name a file")
    if mode == FORCE:
        try:
            os.ftruncate(fd, 0)
        except OSError as e:
            os.close(fd)
            raise os_problem(path, e, "cannot replace") from None
        except NnbenchError:
            os.close(fd)
            raise
    return path, fd


def refuse_if_busy(path) -> None:
    """Refuse now, in the words of the lock, a regular file that another nnbench is writing: a command names its
    --out before it plans and prints, and would otherwise find the lock taken only when it opens the file to run.
    The lock is only tried here, not held: opening the file to write takes it again, so a writer that starts in
    between is still refused there. A file that cannot be opened to read is one line too."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except (FileNotFoundError, IsADirectoryError):
        return  # the caller's open says so in its own words
    except OSError as e:
        raise os_problem(path, e, "cannot read") from None
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise _busy(path) from None
            except OSError:
                return  # a file system without locks: opening it to write says so
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _busy(path) -> NnbenchError:
    return NnbenchError(f"{path}: another nnbench process is writing this file; wait for it to finish, or write to "
                        "another file")


def _lock(path: Path, fd: int) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise _busy(path) from None
    except OSError as e:
        os.close(fd)
        raise os_problem(path, e, "cannot lock") from None


def readable(path, what: str = "file") -> None:
    """Refuse, before opening it, a path that is not a regular file: opening a FIFO waits for a writer forever,
    and /dev/zero (or a symlink to it) never ends, so a config or result file that names one would hang. A missing
    file or a folder is left to the caller's open, which says so in the caller's words."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as e:  # a symlink loop, a name too long, a folder without x permission
        raise os_problem(path, e, "cannot read") from None
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        raise NnbenchError(f"{path}: not a regular file (a device, a FIFO or a socket); name a {what}")


def read_text(path, what: str = "file") -> str:
    """A UTF-8 text file, or one line saying why it cannot be read."""
    readable(path, what)
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise NnbenchError(f"{path}: no such {what}") from None
    except IsADirectoryError:
        raise NnbenchError(f"{path}: is a folder, not a {what}") from None
    except UnicodeDecodeError as e:
        raise NnbenchError(f"{path}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start})") from None
    except OSError as e:
        raise os_problem(path, e, "cannot read") from None


def _write_then_rename(tmp: Path, target: Path, data: bytes, leftovers: tuple[Path, ...] = ()) -> None:
    """`data` into `tmp` beside `target`, forced to disk, then renamed onto it: a reader sees the old file or the
    new one, never half of one. On an OS error `tmp` (and `leftovers`) go, and the error is one line."""
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except OSError as e:
        for leftover in (tmp, *leftovers):
            try:
                leftover.unlink()
            except OSError:
                pass
        raise os_problem(target, e) from None


def write_atomic(path, text: str) -> None:
    """Replace `path` with `text` in one step (a cache another nnbench may be reading): no lock, no refusal."""
    import tempfile
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
    except OSError as e:
        raise os_problem(path, e) from None
    _write_then_rename(Path(tmp), path, text.encode("utf-8"))


def write_whole(path: Path, text: str | bytes, force: bool = False) -> Path:
    """A report (HTML, a PNG, a JSON file of reported rows) written whole or not at all: into a temporary file in the
    same folder, flushed, then renamed onto `path`. A full disk or a kill leaves no cut-off page under
    the requested name, and without `force` an existing file is refused, never replaced."""
    path = Path(path)
    made = not path.exists()
    # The lock (and the refusal of a taken name) without truncating: the old page stays until the new is whole.
    target, fd = open_locked(path, APPEND if force else NEW)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        _write_then_rename(tmp, target, text if isinstance(text, bytes) else text.encode("utf-8"),
                           (target,) if made else ())
    finally:
        os.close(fd)
    return target
