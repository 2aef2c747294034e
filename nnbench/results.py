"""Flat result records with one schema, streamed to CSV as they are made, and rendered as tables.

Each finished case is appended to the CSV and flushed to disk at once, so a kernel that crashes
the process later never loses what was already measured. The environment (GPU, driver, CUDA,
clocks, nnbench version, git SHA, time) is repeated on every row: any row can be read alone.
"""

from __future__ import annotations

import csv
import datetime as dt
import errno
import io
import math
import os
import re
import socket
import subprocess
from functools import lru_cache
from pathlib import Path

from nnbench import paths, safeio, workloads
from nnbench.errors import NnbenchError
from nnbench.version import __version__
from nnbench.workloads.base import REFERENCE, REFERENCE_VARIANT  # noqa: F401 (statuses live here)

# One schema for every workload: any row of any workload can be read, compared and plotted alone. `workload` is
# the package that ran it (gemm, train, conv, kernel: nnbench/workloads/).
# `shape` is the problem's label, `problem` its axes as "KEY=VALUE ..." text (M=.. N=.. K=.. for a
# GEMM; N C H W K R stride pad for a convolution; net, layers and batch for training), `unit` what
# one timed sample is (launch, iteration, step), and median_ms is per that unit.
IDENTITY = ["workload", "variant", "step", "params", "precision", "shape", "problem", "unit", "sweep"]
MEASUREMENT = ["median_ms", "iqr_ms", "q1_ms", "q3_ms", "min_ms", "mean_ms", "samples", "reps", "noise",
               "converged", "cold", "timing", "sm_clock_mhz", "gpu_ms", "wall_ms", "setup_ms"]
# NVML over the timed window (nnbench/measure.py, nnbench/runtime/nvml.py); empty on the CPU backend.
# energy_j is per unit (launch, iteration, step), measured on the energy counter over a window of energy_window_ms
# (>= 1 s, energy_window_j in all; --energy, docs/ENERGY.md), else empty with energy_note saying why; dropped counts
# the samples left out as throttled.
TELEMETRY = ["dropped", "sm_clock_min_mhz", "mem_clock_mhz", "throttle", "clocks_locked", "power_w", "energy_j",
             "energy_window_ms", "energy_method", "energy_window_j", "energy_note"]
DERIVED = ["flops", "bytes", "gflops", "gbs", "pct_peak", "vendor", "pct_vendor", "speedup", "speedup_over",
           "items_per_s", "gflops_per_j", "items_per_j"]
RESOURCES = ["threads", "registers", "smem_bytes", "local_bytes", "occupancy", "occupancy_limiter"]
# How an autotuned row's tile was chosen (nnbench/runtime/autotune.py): "timed", "paired" or "cache", the
# chosen candidate and its place among them; empty where the case ran its fixed tiles.
TUNING = ["tuned"]
# sanitizer: "sanitized: racecheck" where --sanitize ran the case clean, else the tool and its first report line
VERIFICATION = ["rel_err", "rtol", "seed", "status", "error", "sanitizer"]
# What only some workloads have (empty elsewhere).
TRAINING = ["net", "layers", "encoding", "batch", "ranks", "exchange", "init", "init_scale", "rate", "momentum",
            "tolerance", "max_iterations", "iterations", "final_error", "us_per_iteration", "us_per_feedforward",
            "speedup_vs_sequential", "train_accuracy", "test_accuracy", "test_samples", "launches_per_iteration",
            "threads_per_launch", "busy_threads", "speedup_per_thread", "speedup_per_busy_core",
            "flops_per_iteration", "weights_rel_err", "weights_rtol", "us_per_step", "step_iqr_pct", "samples_per_s",
            "tflops",
            "flops_per_step", "gemm_us", "other_us", "compute_us", "comm_us", "exposed_us", "kernels_us", "rest_us",
            "rank_us_per_step", "rank_kernels_us", "rank_exposed_us", "rank_rest_us", "weak_eff", "strong_eff",
            "buckets", "roles_us", "cublas_gemm_us",
            "vs_cublas_gemms", "launches_per_step", "train_seconds", "epochs", "steps", "steps_per_epoch",
            "train_samples", "tiles"]
CONVOLUTION = ["workspace_bytes"]
ENVIRONMENT = ["backend", "gpu", "device_index", "gpu_uuid", "cc", "sms",
               "driver", "cuda", "nvcc", "max_sm_clock_mhz", "fp32_peak_tflops",
               "tf32_peak_tflops", "dram_peak_gbs", "nnbench_version", "git_sha", "source_repo", "provenance", "host",
               "timestamp"]
# git_sha: the commit of the code that made the row: nnbench's, or for a user's kernel the commit of the
# repository holding its source (source_repo; both empty outside one). provenance: nnbench/runtime/provenance.py's
# digest of the kernel source with its headers, the flags, nnbench's version and the driver.
PROVENANCE = ("source_repo", "provenance")
# Every kept sample (ms per unit, each over `reps` launches), space-separated; last, since it is long.
RAW = ["samples_ms"]
# A cell of up to max_samples (100,000) samples runs to about 1 MB, past the csv module's 128 KiB default.
csv.field_size_limit(2**31 - 1)
FIELDS = (IDENTITY + MEASUREMENT + TELEMETRY + DERIVED + RESOURCES + TUNING + VERIFICATION + TRAINING + CONVOLUTION
          + ENVIRONMENT + RAW)

# What older files call by another name, read as today's (`upgrade_row`, `upgrade_frame`): the column `suite` is
# `workload`, and the registry's family names that rows once carried are the workload they belong to. A file of
# either age loads, resumes and compares; a file is only ever written with today's names.
OLD_COLUMNS = {"suite": "workload"}
OLD_WORKLOADS = {"mlp": "train", "mlp-batched": "train", "conv-backward": "conv", "pool": "conv", "conv-model": "conv"}
FIELDS_BEFORE_WORKLOAD = [{v: k for k, v in OLD_COLUMNS.items()}.get(f, f) for f in FIELDS]
FIELDS_BEFORE_PROVENANCE = [f for f in FIELDS_BEFORE_WORKLOAD if f not in PROVENANCE]  # they load, and rerun

# status values: PASS (verified, timed), FAIL (wrong answer, also on the last timed batch, fresh buffers, or
# inputs the kernel edited; timed anyway), SUSPECT (right answer, but a timing beyond the device's roofline
# or work outside the timed stream: nnbench/audit.py), ERROR (the kernel faulted or did not compile), SKIP
# (refused for this device, with the reason in `error`), REFERENCE (no kernel ran: the config's float64
# reference was timed and checked, on the CPU backend; variant `reference`). SUSPECT fails every command and
# the gate as FAIL does.
FAILED = {"FAIL", "SUSPECT", "ERROR"}
STATUSES = {"PASS", "FAIL", "SUSPECT", "ERROR", "SKIP", REFERENCE}
TIMED = {"PASS", REFERENCE}  # rows whose median is a verified time (of a kernel, or of the reference)


@lru_cache(maxsize=1)
def git_sha() -> str:
    """The commit of the code that made a figure: git's HEAD (with -dirty for uncommitted changes), or
    NNBENCH_GIT_SHA where the checkout has no git metadata (a copy of the tree on a lent GPU machine)."""
    given = os.environ.get("NNBENCH_GIT_SHA", "").strip()
    if given:
        return given
    # GIT_OPTIONAL_LOCKS=0: reading the SHA must never write the user's index (a killed or
    # size-limited run would leave a stale index.lock behind).
    env = dict(os.environ, GIT_OPTIONAL_LOCKS="0")
    try:
        out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=paths.ROOT, capture_output=True,
                             text=True, timeout=5, env=env)
        sha = out.stdout.strip()
        if sha:
            dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=paths.ROOT,
                                   capture_output=True, text=True, timeout=5, env=env).stdout.strip()
            return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


def environment(backend) -> dict:
    env = dict(backend.environment())
    env.update(nnbench_version=__version__, git_sha=git_sha(), host=socket.gethostname(),
               timestamp=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))
    return {k: env.get(k) for k in ENVIRONMENT}


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "device"


def default_path(name: str, gpu: str) -> Path:
    """results/<name>-<gpu>-<timestamp>.csv (a command's or a sweep's name): a name, not a reservation. A sink
    opened in UNIQUE mode takes it, or the next free `-N` after it, atomically (two runs in the same second)."""
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return paths.RESULTS / f"{name}-{slug(gpu)}-{stamp}.csv"




class Sinks:
    """Several sinks fed the same records (the CSV and the JSON file); `path` is the first one's."""

    def __init__(self, *sinks) -> None:
        self.sinks = sinks
        self.path = sinks[0].path

    @property
    def rows(self) -> int:
        return self.sinks[0].rows

    def append(self, record: dict) -> None:
        for s in self.sinks:
            s.append(record)

    def close(self) -> None:
        for s in self.sinks:
            s.close()


class LineSink:
    """A result file written one line per record: opened through `safeio` (exclusive creation,
    O_APPEND, an advisory lock held until `close`), each line one write(2), forced to disk before
    `append` returns. A file whose last line a kill cut short is ended before the next line."""

    _made = False  # this sink wrote the header: the file is this run's alone

    def __init__(self, path: Path, mode: str, flag: str | None = "--force") -> None:
        self.path, self._fd = safeio.open_locked(Path(path), mode, flag)
        self.rows = 0  # written by this sink
        self._lead = ""  # what the first line must start with
        try:
            end = os.fstat(self._fd).st_size
            if end > 0:
                with open(self.path, "rb") as f:
                    f.seek(-1, os.SEEK_END)
                    if f.read(1) != b"\n":  # a line cut short by a kill: end it (with our first line, so a
                        self._lead = "\n"  # file refused for its schema is left exactly as it was)
                self.check_existing()
            else:
                self._write(self.header())
                self._made = True
        except OSError as e:
            self._fail(e)
        except NnbenchError:
            self.close()
            raise

    def header(self) -> str:
        return ""

    def check_existing(self) -> None:
        """Refuse (NnbenchError) to add to a file of another format."""

    def line(self, record: dict) -> str:
        raise NotImplementedError

    def append(self, record: dict) -> None:
        if self._fd is None:
            raise NnbenchError(f"{self.path}: the result file is closed (an earlier write failed)")
        try:
            self._write(self._lead + self.line(record))
        except OSError as e:
            self._fail(e)
        self._lead = ""
        self.rows += 1

    def _write(self, text: str) -> None:
        """One line, one write(2) (O_APPEND puts it at the end), forced to disk before returning. A
        write that fails part-way (a full disk) is cut back, so the file never ends in a fragment."""
        if not text:
            return
        data = memoryview(text.encode("utf-8"))
        start = os.fstat(self._fd).st_size
        try:
            while data:
                data = data[os.write(self._fd, data):]
        except OSError:
            try:
                os.ftruncate(self._fd, start)  # we hold the lock: nobody else appended meanwhile
            except OSError:
                pass
            raise
        try:
            os.fsync(self._fd)
        except OSError as e:
            if e.errno != errno.EINVAL:  # a file that cannot sync (a pipe): the write was the write
                raise

    def _fail(self, e: OSError):
        """A write failed (a full disk): release the file and say so in one line."""
        self.close()
        kept = f"; the {self.rows} rows written before are kept" if getattr(self, "rows", 0) else ""
        raise NnbenchError(f"{safeio.os_problem(self.path, e)}{kept}") from None

    def close(self) -> None:
        """Release the file; one this sink made and wrote no row to is removed (a run interrupted, or
        refused, before its first row), so no header-only file trips `report`, `check` or a resume."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            if self._made and not self.rows:
                Path(self.path).unlink(missing_ok=True)  # still under our lock: nobody appended meanwhile
            os.close(fd)  # releases the lock


class CsvSink(LineSink):
    """Appends one CSV row per finished case (see LineSink); with `append` (a resumed sweep) it adds
    to an existing file of the same schema. `path` is the file actually written (UNIQUE mode may
    add a suffix)."""

    def __init__(self, path: Path, append: bool = False, fields: list[str] = FIELDS,  # noqa: B006
                 mode: str | None = None) -> None:
        self.fields = fields
        super().__init__(path, mode or (safeio.APPEND if append else safeio.NEW))

    def header(self) -> str:
        return _csv_line(dict(zip(self.fields, self.fields)), self.fields)

    def line(self, record: dict) -> str:
        return _csv_line({k: _csv_value(record.get(k)) for k in self.fields}, self.fields)


class NullSink:
    """Where the other ranks of a data-parallel run send their rows: rank 0 writes the CSV."""

    def append(self, record: dict) -> None:
        pass

    def close(self) -> None:
        pass


def refuse_sanitized(path, sanitizer_values, use: str) -> None:
    """A file whose every row a sanitized run wrote (--sanitize TOOL: each case run once under compute-sanitizer,
    its hazards recorded, nothing timed) has no timings for `use`: refused in one line, not read as a timed run
    whose medians are missing."""
    values = [str(v).strip() for v in sanitizer_values]
    if values and all(v and v.lower() != "nan" for v in values):
        raise NnbenchError(f"{path}: the rows of a sanitized run (--sanitize): they record each case's hazards, not "
                           f"its timings; {use} takes the rows of a timed run")


def case_key(workload: str, variant: str, params: str, shape: str, cold) -> str:
    """What makes two rows the same case, for resuming a sweep and for regression verdicts: the workload, the
    variant, its parameters (`case_params`, never the display text around them) and the problem."""
    mode = "cold" if str(cold).lower() in ("true", "1") else "hot"
    return f"{workload}|{variant}|{case_params(workload, variant, params)}|{shape}|{mode}"


@lru_cache(maxsize=4096)
def case_params(workload: str, variant: str, params: str) -> str:
    """The parameters of a `params` cell as identity: its NAME=VALUE tokens, sorted, without a parameter that
    the registry's row for the variant sets to its default. The cell is also display text: what the host
    did follows " · " (step 9's "· TMA, split-K 2"), and a parameter added to a variant later is absent from
    older files at its default; neither makes another case. Text that is not NAME=VALUE (a vendor row's
    "sgemm via cupy") is kept as it is."""
    text = str(params or "").split(" · ", 1)[0].strip()
    tokens = text.split()
    if not tokens or not all(re.fullmatch(r"\w+=-?\w+", t) for t in tokens):
        return text
    defaults = next((v.defaults() for v in workloads.all_variants() if v.workload == workload and v.name == variant),
                    {})
    pairs = (t.split("=", 1) for t in tokens)
    return " ".join(sorted(f"{k}={v}" for k, v in pairs if str(defaults.get(k)) != v))


def case_key_of(row: dict) -> str:
    # A vendor row (cuBLAS, cuDNN, PyTorch: no ladder step) has params text that says which library
    # called it and how; the case is the same either way.
    vendor = str(row.get("step") if row.get("step") is not None else "") in ("", "nan")
    params = "" if vendor else (row.get("params") or "")
    return case_key(row.get("workload") or "", row.get("variant") or "", params, row.get("shape") or "",
                    row.get("cold"))


def upgrade_row(row: dict) -> dict:
    """A row or record as read from a file of any age, in today's names (OLD_COLUMNS, OLD_WORKLOADS)."""
    out = {OLD_COLUMNS.get(k, k): v for k, v in row.items() if k not in OLD_COLUMNS or OLD_COLUMNS[k] not in row}
    if out.get("workload") in OLD_WORKLOADS:
        out["workload"] = OLD_WORKLOADS[out["workload"]]
    return out


def upgrade_frame(df):
    """A DataFrame read from a result file of any age, in today's names (see upgrade_row)."""
    df = df.rename(columns={k: v for k, v in OLD_COLUMNS.items() if k in df.columns and v not in df.columns})
    if "workload" in df.columns:
        df["workload"] = df["workload"].replace(OLD_WORKLOADS)
    return df


NUMERIC = {"median_ms", "iqr_ms", "q1_ms", "q3_ms", "min_ms", "mean_ms", "noise", "sm_clock_mhz", "gpu_ms", "wall_ms",
           "setup_ms", "sm_clock_min_mhz", "mem_clock_mhz", "power_w", "energy_j", "energy_window_ms", "gflops_per_j",
           "items_per_j", "flops", "bytes", "gflops", "gbs", "pct_peak", "pct_vendor", "speedup", "items_per_s",
           "occupancy", "rel_err", "rtol", "max_sm_clock_mhz", "fp32_peak_tflops", "dram_peak_gbs",
           "us_per_iteration", "us_per_step", "samples_per_s", "weights_rel_err", "energy_window_j"}


def parse_samples(text) -> list[float] | None:
    """A `samples_ms` cell back into its list (None where the cell is empty: a file from before raw
    samples were kept, or a row that never ran)."""
    if text is None or (isinstance(text, float) and math.isnan(text)):
        return None
    text = str(text).strip()
    if not text:
        return None
    try:
        out = [float(x) for x in text.split()]
    except ValueError:  # not "no samples": a damaged or hand-edited cell, which the gate must not read as absent
        raise NnbenchError(f"samples_ms {text[:40]!r}: expected sample times in ms separated by spaces") from None
    if not all(0 <= x < math.inf for x in out):  # NaN fails both comparisons
        raise NnbenchError(f"samples_ms {text[:40]!r}: every sample time is a finite number of ms >= 0")
    return out


# The cells every reader (check, report, history) builds on: a damaged one is refused with its line, never read as
# "no measurement" (a median of "fast" or NaN used to drop a case from the gate without a word).
CORE = ("status",)  # without it no row is a result (older train files lack variant and median_ms, report's tests suite)
TIMES = ("median_ms", "iqr_ms", "q1_ms", "q3_ms", "min_ms", "mean_ms")
COUNTS = ("samples", "reps", "dropped", "batch")


def damaged_cell(row: dict, times: bool = True) -> str | None:
    """What is wrong with a result row's names, times and counts (text from a CSV, or JSON values), or None.
    times=False leaves the times to the gate, whose verdict on a damaged median is INVALID (a case, not a file)."""
    if None in row:  # csv.DictReader's key for cells past the header's columns
        return f"{len(row[None])} more cells than the header has columns"
    for key in ("workload", "suite", "variant"):  # suite: the old name of workload
        v = row.get(key)
        if key in row and not (isinstance(v, str) and v.strip() and v.isprintable()):
            return f"{key} {v!r}: expected a name (printable text)"
    for key in TIMES + COUNTS:
        v = row.get(key)
        if v is None or v == "":
            continue
        if isinstance(v, bool):  # JSON's true is no number of ms, for the gate either
            return f"{key} {v!r}: expected a number, not true or false"
        if key in TIMES and not times:
            continue
        try:
            x = float(v) if not isinstance(v, bool) and isinstance(v, str | int | float) else None
        except ValueError:
            x = None
        if key in COUNTS and x is not None and math.isnan(x):  # a count no run had (csv's text for a float NaN)
            continue
        if x is None or not 0 <= x < math.inf or (key in COUNTS and not x.is_integer()):
            kind = "a whole number >= 0" if key in COUNTS else "a finite time in ms >= 0"
            return f"{key} {v!r}: expected {kind}, or an empty cell"
    return None


def scan_csv(path, times: bool = True) -> None:
    """A result CSV's header and each row whose status is valid (a row cut short by a kill is the readers' to set
    aside), checked with the csv module before pandas reads it: pandas renames a repeated column (median_ms.1) and
    takes a row with one cell too many as an index, both without a word."""
    import csv
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader, None) or []
        twice = sorted({h for h in header if header.count(h) > 1})
        if twice:
            raise NnbenchError(f"{path}:1: column {twice[0]} appears twice; a result file has each column once")
        missing = [c for c in CORE if c not in header]
        for i, cells in enumerate(reader, start=2):
            if missing:  # rows that no reader would take as results: the file would pass for an empty one
                raise NnbenchError(f"{path}:1: not an nnbench result CSV; missing columns: {', '.join(missing)}")
            row = dict(zip(header, cells))
            if len(cells) > len(header):
                row[None] = cells[len(header):]
            if row.get("status") not in STATUSES:
                continue
            why = damaged_cell(row, times)
            if why is not None:
                raise NnbenchError(f"{path}:{i}: {why}")


def parse_row(row: dict) -> dict:
    """A CSV row back into a record: numbers as floats, empty cells as None."""
    out = {}
    for k, v in row.items():
        if v in ("", None):
            out[k] = None
        elif k == "samples_ms":
            out[k] = parse_samples(v)
        elif k in NUMERIC:
            try:
                out[k] = float(v)
            except ValueError:
                out[k] = None
        else:
            out[k] = v
    return out


def _csv_line(row: dict, fields: list[str]) -> str:
    line = io.StringIO()
    csv.DictWriter(line, fieldnames=fields, extrasaction="ignore").writerow(row)
    return line.getvalue()


def _csv_value(v):
    if v is None:
        return ""
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    if isinstance(v, list | tuple):  # raw samples: space-separated, 6 significant digits (event resolution)
        return " ".join(f"{x:.6g}" for x in v)
    return v


def read_csv(path, times: bool = True, **options):
    """A result CSV as a DataFrame, in today's column names (upgrade_frame); every way it can be unreadable is one
    NnbenchError naming it. `times`: as damaged_cell's."""
    import pandas as pd

    from nnbench import safeio
    from nnbench.errors import NnbenchError
    safeio.readable(path, "result file")
    try:
        scan_csv(path, times)
        # pandas 3 reads every column into a block of its own; copy() joins them, or the first column a
        # caller adds (report's _file) meets a 125-block frame and pandas warns that it is fragmented
        return upgrade_frame(pd.read_csv(path, encoding="utf-8", **options).copy())
    except FileNotFoundError:
        raise NnbenchError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise NnbenchError(f"{path}: is a folder, not a result file") from None
    except pd.errors.EmptyDataError:
        raise NnbenchError(f"{path}: empty; not a result CSV") from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError, csv.Error) as e:
        raise NnbenchError(f"{path}: not a result CSV ({type(e).__name__})") from None
    except OSError as e:
        raise safeio.os_problem(path, e, "cannot read") from None
