"""Issue 42, "nothing lost, nothing left behind": a case is done only when every sink holds it, a refused
command creates nothing, a killed sweep leaves no header-only file, and report's outputs are whole or absent
(a full disk is simulated with RLIMIT_FSIZE, which fails a write past the limit with EFBIG). CPU only."""

import csv
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nnbench import paths, rawresults, results

EXAMPLE = paths.ROOT / "examples" / "vector_add"


def tiny_kernel(tmp_path: Path, reference: str | None = None) -> Path:
    """vector_add with two cases on two small problems: a CPU sweep of it takes about a second."""
    folder = tmp_path / "k"
    folder.mkdir()
    for name in ("vector_add.cu", "reference.py"):
        shutil.copy(EXAMPLE / name, folder / name)
    text = (EXAMPLE / "vector_add.yaml").read_text()
    text = text.replace("axes: {BLOCK: [256, 64, 128, 512, 1024], ITEMS: [1, 2, 4]}",
                        "axes: {BLOCK: [64, 128], ITEMS: [1]}")
    text = text.replace("- {N: [1000003, 16777216]}", "- {N: [100, 200]}").replace("budget: 0.3", "budget: 0.01")
    if reference is not None:
        (folder / "reference.py").write_text(reference)
        text = text.replace("timing: {budget: 0.01}", "timing: {budget: 0.01, watchdog: 120}")
    (folder / "vector_add.yaml").write_text(text)
    return folder / "vector_add.yaml"


def nnbench(*args, cwd, fsize: int | None = None, wait: bool = True):
    env = dict(os.environ, PYTHONPATH=str(paths.ROOT), XDG_CONFIG_HOME=str(cwd / "config-home"),
               NNBENCH_BACKEND="cpu", MPLCONFIGDIR=str(cwd / "mpl"))

    def limit():  # a disk that fills at `fsize` bytes a file
        if fsize is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, resource.RLIM_INFINITY))

    p = subprocess.Popen([sys.executable, "-m", "nnbench", *map(str, args)], cwd=cwd, env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=limit)
    if not wait:
        return p
    out, err = p.communicate(timeout=180)
    return p.returncode, out + err


def keys(path: Path) -> set[str]:
    return {r.key for r in rawresults.load(path)}


def test_a_case_is_done_only_when_the_json_file_holds_it(tmp_path):
    config = tiny_kernel(tmp_path)
    rc, out = nnbench("sweep", config, "--out", "o.csv", "--json", "o.jsonl", cwd=tmp_path)
    assert rc == 0, out
    jsonl = tmp_path / "o.jsonl"
    lines = jsonl.read_text().splitlines(keepends=True)
    at = max(i for i, line in enumerate(lines) if json.loads(line).get("variant") == "vector_add")
    lost = json.loads(lines[at])  # a case a resume skips when it is done (the reference rows always run)
    jsonl.write_text("".join(lines[:at] + lines[at + 1:]))  # the CSV took the row, a full disk refused the JSON line
    rc, out = nnbench("sweep", config, "--out", "o.csv", "--json", "o.jsonl", cwd=tmp_path)
    assert rc == 0, out
    assert keys(tmp_path / "o.csv") == keys(jsonl)
    assert results.case_key_of(lost) in keys(jsonl)


def test_a_refused_json_creates_nothing_and_names_no_missing_option(tmp_path):
    config = tiny_kernel(tmp_path)
    (tmp_path / "taken.jsonl").write_text("someone else's\n")
    rc, out = nnbench("sweep", config, "--out", "new.csv", "--json", "taken.jsonl", cwd=tmp_path)
    assert rc == 2 and "Traceback" not in out, out
    assert "taken.jsonl: the file exists" in out and "--force" not in out, out  # sweep has no --force
    assert not (tmp_path / "new.csv").exists()
    assert (tmp_path / "taken.jsonl").read_text() == "someone else's\n"


def test_a_sweep_killed_before_its_first_row_leaves_no_file(tmp_path):
    config = tiny_kernel(tmp_path, reference="import time\n\n\ndef vector_add(a, b, c, n):\n    time.sleep(100)\n")
    p = nnbench("sweep", config, "--out", "o.csv", cwd=tmp_path, wait=False)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (tmp_path / "o.csv").exists() and p.poll() is None:
        time.sleep(0.1)
    assert (tmp_path / "o.csv").exists(), p.communicate()
    time.sleep(1.0)  # into the reference's case
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 143 and "Traceback" not in err, err
    assert not (tmp_path / "o.csv").exists()


@pytest.fixture()
def result_csv(tmp_path):
    rc, out = nnbench("sweep", tiny_kernel(tmp_path), "--out", "o.csv", cwd=tmp_path)
    assert rc == 0, out
    return tmp_path / "o.csv"


def test_report_json_on_a_full_disk_leaves_no_file_cut_short(tmp_path, result_csv):
    rc, out = nnbench("report", result_csv, "--json", "whole.jsonl", cwd=tmp_path)
    assert rc == 0, out
    lines = (tmp_path / "whole.jsonl").read_text().splitlines(keepends=True)
    room = len(lines[0]) + len(lines[1]) + 10  # the header and one record fit, the rest does not
    rc, out = nnbench("report", result_csv, "--json", "full.jsonl", cwd=tmp_path, fsize=room)
    assert rc == 2 and "Traceback" not in out and "full.jsonl" in out, out
    assert not (tmp_path / "full.jsonl").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".full.jsonl")]


def test_report_plot_on_a_full_disk_leaves_no_file_cut_short(tmp_path, result_csv):
    pytest.importorskip("matplotlib")
    rc, out = nnbench("report", result_csv, "--plot", "roofline", "--out", "whole.png", cwd=tmp_path)
    if rc == 2 and "nothing to plot" in out:
        pytest.skip(out)
    assert rc == 0, out
    room = (tmp_path / "whole.png").stat().st_size // 2
    rc, out = nnbench("report", result_csv, "--plot", "roofline", "--out", "full.png", cwd=tmp_path, fsize=room)
    assert rc == 2 and "Traceback" not in out and "full.png" in out, out
    assert not (tmp_path / "full.png").exists()


def test_report_force_replaces_a_json_file_whole(tmp_path, result_csv):
    (tmp_path / "r.jsonl").write_text("old\n")
    rc, out = nnbench("report", result_csv, "--json", "r.jsonl", "--force", cwd=tmp_path)
    assert rc == 0, out
    assert keys(tmp_path / "r.jsonl") == keys(result_csv)
    assert len(list(csv.DictReader(result_csv.open()))) == len(rawresults.load(tmp_path / "r.jsonl"))
