"""`nnbench report --html`: the page is self-contained (no address outside it), and in a real headless
Chromium (Debian's, driven by Playwright) it renders with no console error, its tables sort and
filter, and its figures load. Made from two of the committed H100 baseline runs of configs/ci.yaml (one checked
against the other), the training table sweep, and a fresh CPU run."""

import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from nnbench.cli import cli

from .conftest import missing

DATA = Path("docs/data/figures")
RUNS = Path("results/baselines/nvidia-h100-80gb-hbm3")
BASELINE, CURRENT = RUNS / "run-01.csv", RUNS / "run-02.csv"  # 56 cases with raw samples; run-02 passes against run-01


def _report(tmp_path: Path, *args: str) -> Path:
    pytest.importorskip("matplotlib")
    out = tmp_path / "report.html"
    res = CliRunner().invoke(cli, ["report", *args, "--html", str(out)])
    assert res.exit_code == 0, res.output
    return out


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        if shutil.which(name):
            return shutil.which(name)
    missing("Chromium is not installed (Debian: apt-get install chromium); .ci/run installs it")


def _browse(page_path: Path, action):
    """Open the page in headless Chromium; run action(page); return the console errors and page errors."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the test extra")
    errors = []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("console", lambda m: errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
            page.on("request", lambda r: errors.append(f"network: {r.url}")
                    if not r.url.startswith(("file:", "data:")) else None)
            page.goto(page_path.resolve().as_uri())
            page.wait_for_selector("body[data-ready='1']", timeout=10000)
            action(page)
        finally:
            browser.close()
    return errors


def _column(page, table: str, name: str) -> list[str]:
    heads = page.locator(f"#{table} thead th").all_inner_texts()
    i = heads.index(name) + 1
    return page.locator(f"#{table} tbody tr td:nth-child({i})").all_inner_texts()


def test_the_page_is_self_contained(tmp_path):
    text = _report(tmp_path, str(CURRENT), "--baseline", str(BASELINE)).read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)  # nothing fetched from elsewhere
    for needle in ("NVIDIA H100 80GB HBM3", "Gate verdicts", "the gate <b>passes</b>", "DataTable(",
                   f"nnbench report {CURRENT} --workload gemm --plot roofline --out "
                   "gemm-roofline.png",
                   'id="fig-gemm-roofline"', 'id="fig-conv-conv"', 'id="fig-train-train"',
                   'id="rows-gemm"', 'id="rows-train"', 'id="rows-conv"'):
        assert needle in text, needle


def test_ci_report_renders_sorts_and_filters_in_chromium(tmp_path):
    out = _report(tmp_path, str(CURRENT), "--baseline", str(BASELINE))
    seen = {}

    def act(page):
        page.screenshot(path=str(tmp_path / "ci.png"), full_page=True)
        seen["loaded"] = page.evaluate("Array.from(document.images).every(i => i.complete && i.naturalWidth > 0)")
        seen["figures"] = page.locator("figure img").count()
        page.locator("#rows-gemm thead th", has_text="median_ms").click()
        seen["up"] = [float(v) for v in _column(page, "rows-gemm", "median_ms")]
        page.locator("#rows-gemm thead th", has_text="median_ms").click()
        seen["down"] = [float(v) for v in _column(page, "rows-gemm", "median_ms")]
        page.fill("#rows-gemm_filter input", "tf32x3")
        seen["filtered"] = set(_column(page, "rows-gemm", "variant"))
        seen["verdicts"] = page.locator("#verdicts tbody tr").count()

    errors = _browse(out, act)
    assert errors == []
    assert seen["loaded"] and seen["figures"] >= 3
    assert len(seen["up"]) == 36 and seen["up"] == sorted(seen["up"]) and seen["down"] == sorted(seen["up"])[::-1]
    assert seen["filtered"] and all("tf32x3" in v for v in seen["filtered"])
    assert seen["verdicts"] == 56


def test_training_sweep_report_renders_in_chromium(tmp_path):
    """The H100 training-table sweep beside a training run made here on the CPU path."""
    fresh = tmp_path / "train-cpu.csv"
    res = CliRunner().invoke(cli, ["train", "--net", "1", "--backend", "cpu", "--max-iterations", "60",
                                   "--csv", str(fresh)])
    assert res.exit_code == 0, res.output
    out = _report(tmp_path, str(DATA / "train_table_h100.csv"), str(fresh))
    seen = {}

    def act(page):
        seen["figures"] = page.locator("figure").evaluate_all("fs => fs.map(f => f.id)")
        page.locator("#rows-train thead th", has_text="variant").click()
        seen["variants"] = _column(page, "rows-train", "variant")

    assert _browse(out, act) == []
    assert "fig-train" in seen["figures"]
    assert seen["variants"] == sorted(seen["variants"]) and len(seen["variants"]) == 97
