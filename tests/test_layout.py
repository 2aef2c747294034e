"""The shipped tree stays a product, with the lab beside it: scripts/ holds only product tools, the data
outside lab/ stay small (the curated data behind the cited figures, the baselines, the test fixtures), and the
user docs speak of the product as it is now, not of the sessions, issues and lent machines that made it."""

import re
import subprocess
from pathlib import Path

import pytest

from nnbench import paths

MAX_SCRIPTS = 5
MAX_DATA_BYTES = 3_000_000
DATA_SUFFIXES = {".csv", ".json", ".jsonl", ".txt", ".log", ".npy", ".npz", ".png", ".jpg", ".svg", ".gz", ".tgz",
                 ".zip", ".tar", ".parquet", ".sqlite", ".db", ".pkl"}
# History words that belong in lab/journal, not in pages about the product.
HISTORY_WORDS = {"a session number": re.compile(r"\bsessions?\s*\d", re.IGNORECASE),
                 "an issue number": re.compile(r"\bissues?\s*#?\d", re.IGNORECASE),
                 '"lent"': re.compile(r"\blent\b", re.IGNORECASE)}


def _tracked(*pathspec: str, root: Path = paths.ROOT) -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--", *pathspec], cwd=root, capture_output=True, check=True,
                             timeout=60).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [p for p in out.decode().split("\0") if p and (root / p).is_file()]  # a deletion not yet committed


def scripts_in(root: Path) -> list[str]:
    return _tracked("scripts", root=root)


def data_outside_lab(root: Path) -> dict[str, int]:
    return {p: (root / p).stat().st_size for p in _tracked(root=root)
            if not p.startswith("lab/") and "".join(Path(p).suffixes[-1:]).lower() in DATA_SUFFIXES}


def user_docs(root: Path) -> list[str]:
    return [p for p in _tracked("README.md", "docs", root=root) if p.endswith(".md")]


def history_words(root: Path) -> list[str]:
    found = []
    for doc in user_docs(root):
        for n, line in enumerate((root / doc).read_text().splitlines(), 1):
            found += [f"{doc}:{n}: {what}: {m.group(0)!r}" for what, rx in HISTORY_WORDS.items()
                      for m in rx.finditer(line)]
    return found


def test_scripts_holds_only_the_product_tools():
    found = scripts_in(paths.ROOT)
    assert len(found) <= MAX_SCRIPTS, f"{len(found)} files in scripts/ (at most {MAX_SCRIPTS}; studies go to lab/): " \
                                      f"{found}"


def test_the_tree_outside_lab_holds_at_most_3_mb_of_data():
    sizes = data_outside_lab(paths.ROOT)
    biggest = sorted(sizes.items(), key=lambda kv: -kv[1])[:5]
    assert sum(sizes.values()) <= MAX_DATA_BYTES, (f"{sum(sizes.values()):,} bytes of data outside lab/ (at most "
                                                   f"{MAX_DATA_BYTES:,}); the biggest: {biggest}")


def test_user_docs_name_no_session_issue_or_lent_machine():
    found = history_words(paths.ROOT)
    assert not found, "history words in the user docs (they belong in lab/journal):\n" + "\n".join(found[:20])


def test_the_user_docs_are_found():
    """The checks above read something: the README and the docs pages are among the tracked files."""
    docs = user_docs(paths.ROOT)
    assert "README.md" in docs and "docs/RESULTS.md" in docs and not any(d.startswith("lab/") for d in docs)
