"""`report --html` from result files anyone can write (a CI artifact, a pull request's baseline): every
cell, suite name and environment field reaches the page as text, never as markup. Checked twice: by
parsing the page (html.parser: no element or attribute the files injected), and in headless Chromium
(no injected script runs); the browser half skips where Chromium is absent, as tests/test_html_report.py's."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner

from nnbench import results
from nnbench.cli import cli

SOURCE = Path("docs/data/figures/ci_again.csv")
BASELINE = Path("results/baselines/nvidia-h100-80gb-hbm3.csv")  # the README showcase's gate baseline
# Each payload sets window.__pwned if it ever runs: a script element, an attribute broken out of
# (double and single quotes), an element opened after closing the figure's caption.
PAYLOADS = ['<script>window.__pwned=1</script>', '" onerror="window.__pwned=2" data-pwned="',
            "' onerror='window.__pwned=3' '", '</figcaption><img src=x onerror=window.__pwned=4>',
            '</code><svg onload=window.__pwned=5>',
            '</title><script>window.__pwned=6</script>']
EVIL = "".join(PAYLOADS)
COLUMNS = ["variant", "params", "shape", "error", "timestamp", "gpu", "git_sha", "host", "precision", "backend",
           "driver"]


def hostile_csv(tmp_path: Path, name: str = "evil<img src=x onerror=window.__pwned=7>.csv") -> Path:
    """The H100 gate run with the gemm rows' workload and every text column carrying every payload."""
    pd = pytest.importorskip("pandas")
    df = results.upgrade_frame(pd.read_csv(SOURCE))  # a file of either age, in today's column names
    df.loc[df["workload"] == "gemm", "workload"] = "gemm" + EVIL
    for c in COLUMNS:
        if c in df:
            df[c] = df[c].astype(str) + EVIL
    df.loc[df["workload"] == "conv", "status"] += EVIL  # the others keep theirs, so their figures are drawn
    out = tmp_path / name
    df.to_csv(out, index=False)
    return out


def render(tmp_path: Path, *extra: str) -> Path:
    pytest.importorskip("matplotlib")
    out = tmp_path / "report.html"
    res = CliRunner().invoke(cli, ["report", str(hostile_csv(tmp_path)), *extra, "--html", str(out)])
    assert res.exit_code == 0, res.output
    return out


class Elements(HTMLParser):
    """Every start tag with its attributes, and the text of each script element."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, list]] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, attrs))
        self._in_script = tag == "script"
        if self._in_script:
            self.scripts.append("")

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, attrs))

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data


def injected(page: str) -> list[str]:
    """What the page's structure holds that nnbench never writes: an event-handler attribute, a
    payload inside a script or an attribute other than a text one, an image not an inlined PNG."""
    p = Elements()
    p.feed(page)
    found = []
    for tag, attrs in p.tags:
        for k, v in attrs:
            if k.startswith("on") or "pwned" in k or k in ("'", '"'):
                found.append(f"<{tag} {k}={v!r}>")
            if k == "href" and not re.fullmatch(r"#[\w.-]+|data:,", v or "", re.ASCII):  # its anchors, no icon
                found.append(f"<{tag} {k}={v!r}>")
        if tag == "img" and not dict(attrs).get("src", "").startswith("data:image/png;base64,"):
            found.append(f"<img {attrs}>")
        if tag == "svg" and any(k.startswith("on") for k, _ in attrs):
            found.append(f"<svg {attrs}>")
    if len(p.scripts) != 3:  # jQuery, DataTables, and the line that starts them
        found.append(f"{len(p.scripts)} script elements")
    found += [f"script holds {s[:60]!r}" for s in p.scripts if "__pwned" in s]
    return found


def test_the_parser_check_finds_an_injection():
    """The check itself, on a page with the defect it looks for planted."""
    page = ("<html><body><script></script><script></script><script></script><figure><img alt=\"a\" "
            "src=\"data:image/png;base64,AA\"><figcaption>gemm</figcaption><img src=x onerror=window.__pwned=4>"
            "</figure></body></html>")
    assert injected(page) and any("onerror" in f for f in injected(page))
    assert injected("<script>window.__pwned=1</script>" * 4)


def test_hostile_cells_reach_the_page_as_text(tmp_path):
    page = render(tmp_path, "--baseline", str(BASELINE)).read_text()
    assert injected(page) == []
    # every payload is on the page, as text: escaped, not dropped
    assert "&lt;/figcaption&gt;&lt;img src=x onerror=window.__pwned=4&gt;" in page
    assert page.count("<figcaption>") >= 3


def test_no_injected_script_runs_in_chromium(tmp_path):
    from tests.test_html_report import _browse
    out = render(tmp_path, "--baseline", str(BASELINE))
    seen = {}

    def act(page):
        page.wait_for_timeout(300)  # an <img onerror> fires once its load fails
        seen["pwned"] = page.evaluate("window.__pwned === undefined ? null : window.__pwned")
        seen["caption"] = page.locator("figcaption").first.inner_text()
        page.fill("input[type=search]", "pwned")  # DataTables redraws the filtered rows from their cells
        page.wait_for_timeout(100)
        seen["after_filter"] = page.evaluate("window.__pwned === undefined ? null : window.__pwned")

    errors = _browse(out, act)
    assert seen["pwned"] is None and seen["after_filter"] is None, seen
    assert "window.__pwned=4" in seen["caption"]  # shown as text
    assert not [e for e in errors if "pwned" in e], errors


@pytest.mark.parametrize("force", [False, True], ids=["new", "force"])
def test_a_full_disk_leaves_no_cut_off_page(tmp_path, monkeypatch, force):
    """The page is written to a temporary file beside it and renamed: a write that fails leaves nothing
    under the requested name (or, with --force, the old page as it was), and no temporary file."""
    import errno
    import os

    from nnbench import safeio
    pytest.importorskip("matplotlib")
    out = tmp_path / "report.html"
    if force:
        out.write_text("the old page")

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(safeio.os, "fsync", full)
    res = CliRunner().invoke(cli, ["report", str(SOURCE), "--html", str(out), *(["--force"] if force else [])])
    assert res.exit_code == 2 and "No space left on device" in res.output and "Traceback" not in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == (["report.html"] if force else [])
    if force:
        assert out.read_text() == "the old page"
