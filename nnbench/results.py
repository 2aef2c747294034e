"""Flat result records with one schema, streamed to CSV as they are made, and rendered as tables.

Each finished case is appended to the CSV and flushed to disk at once, so a kernel that crashes
the process later never loses what was already measured. The environment (GPU, driver, CUDA,
clocks, nnbench version, git SHA, time) is repeated on every row: any row can be read alone.
"""

from __future__ import annotations

import csv
import datetime as dt
import math
import os
import re
import socket
import subprocess
from functools import lru_cache
from pathlib import Path

from rich.table import Table
from rich.text import Text

from nnbench import __version__, paths

IDENTITY = ["suite", "variant", "step", "params", "shape", "M", "N", "K"]
MEASUREMENT = ["median_ms", "iqr_ms", "q1_ms", "q3_ms", "min_ms", "mean_ms", "samples", "reps", "noise",
               "converged", "cold", "sm_clock_mhz"]
DERIVED = ["flops", "bytes", "gflops", "gbs", "pct_peak", "pct_cublas", "speedup_vs_naive"]
RESOURCES = ["threads", "registers", "smem_bytes", "local_bytes", "occupancy", "occupancy_limiter"]
VERIFICATION = ["rel_err", "rtol", "status", "error"]
ENVIRONMENT = ["backend", "gpu", "cc", "sms", "driver", "cuda", "nvcc", "max_sm_clock_mhz", "fp32_peak_tflops",
               "dram_peak_gbs", "nnbench_version", "git_sha", "host", "timestamp"]
FIELDS = IDENTITY + MEASUREMENT + DERIVED + RESOURCES + VERIFICATION + ENVIRONMENT

# status values: PASS (verified, timed), FAIL (wrong answer; timed anyway), ERROR (the kernel
# faulted or did not compile), SKIP (refused for this device, with the reason in `error`).
FAILED = {"FAIL", "ERROR"}


@lru_cache(maxsize=1)
def git_sha() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=paths.ROOT, capture_output=True,
                             text=True, timeout=5)
        sha = out.stdout.strip()
        if sha:
            dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=paths.ROOT,
                                   capture_output=True, text=True, timeout=5).stdout.strip()
            return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


def environment(backend) -> dict:
    env = dict(backend.environment())
    env.update(nnbench_version=__version__, git_sha=git_sha(), host=socket.gethostname(),
               timestamp=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
    return {k: env.get(k) for k in ENVIRONMENT}


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "device"


def default_path(suite: str, gpu: str) -> Path:
    """results/<suite>-<gpu>-<timestamp>.csv, never an existing file."""
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = paths.RESULTS / f"{suite}-{slug(gpu)}-{stamp}"
    path, i = base.with_suffix(".csv"), 1
    while path.exists():
        path, i = Path(f"{base}-{i}.csv"), i + 1
    return path


class CsvSink:
    """Appends one row per finished case and forces it to disk before returning."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "w", newline="")
        self._w = csv.DictWriter(self._f, fieldnames=FIELDS, extrasaction="ignore")
        self._w.writeheader()
        self._sync()

    def append(self, record: dict) -> None:
        self._w.writerow({k: _csv_value(record.get(k)) for k in FIELDS})
        self._sync()

    def _sync(self) -> None:
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()


def _csv_value(v):
    if v is None:
        return ""
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    return v


# -- tables ---------------------------------------------------------------------------------------
def _num(v, fmt: str, missing: str = "—") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return missing
    return format(v, fmt)


def _status(rec: dict) -> Text:
    style = {"PASS": "green", "FAIL": "bold red", "ERROR": "bold red", "SKIP": "yellow"}.get(rec["status"], "")
    return Text(rec["status"], style=style)


def gemm_table(records: list[dict], title: str) -> Table:
    t = Table(title=title, title_justify="left", header_style="bold", pad_edge=False)
    for name, justify in [("variant", "left"), ("params", "left"), ("M×N×K", "left"), ("median ms", "right"),
                          ("±IQR", "right"), ("GFLOP/s", "right"), ("%peak", "right"), ("%cuBLAS", "right"),
                          ("×naive", "right"), ("regs", "right"), ("smem", "right"), ("spill", "right"),
                          ("occ", "right"), ("rel_err", "right"), ("", "left")]:
        t.add_column(name, justify=justify, no_wrap=name in ("variant", "M×N×K"))
    for r in records:
        t.add_row(
            f"{r['step']:>2} {r['variant']}" if r.get("step") not in (None, "") else r["variant"],
            r.get("params") or "",
            r.get("shape") or "",
            _num(r.get("median_ms"), ".4f"),
            _num(None if r.get("median_ms") is None else 100 * r["iqr_ms"] / r["median_ms"], ".1f") + "%"
            if r.get("median_ms") else "—",
            _num(r.get("gflops"), ",.0f"),
            _num(r.get("pct_peak"), ".1f"),
            _num(r.get("pct_cublas"), ".1f"),
            _num(r.get("speedup_vs_naive"), ".1f"),
            _num(r.get("registers"), "d"),
            _num(r.get("smem_bytes") / 1024 if r.get("smem_bytes") is not None else None, ".1f", "—") + "K"
            if r.get("smem_bytes") is not None else "—",
            _num(r.get("local_bytes"), "d"),
            _num(100 * r["occupancy"] if r.get("occupancy") is not None else None, ".0f") + "%"
            if r.get("occupancy") is not None else "—",
            _num(r.get("rel_err"), ".1e"),
            _status(r),
        )
    return t
