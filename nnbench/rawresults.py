"""Results with their raw samples: the `--json FILE` format, its writer and a reader for it and for CSV.

The file is JSON Lines (docs/JSON.md; the JSON Schema is nnbench/schema/results.schema.json):
- line 1, the header: {"format": "nnbench-results", "schema_version": 2, "nnbench_version": ..., "created": ...};
- then one record per line, written the moment its case finishes (a kill loses nothing measured,
  and a sweep resumes into the same file): every column of the CSV schema (results.FIELDS, with
  the device, the environment and the commit on every record) as typed JSON values, plus
  "raw": {"ms": [...], "reps": R, "unit": "launch"|"iteration"|"step", "batch": B, "dropped": D},
  each entry of "ms" one sample's milliseconds per unit, the mean over its R back-to-back launches
  (7 significant digits: CUDA events resolve about 0.5 us).
  Non-finite numbers (a failed case's rel_err) are the strings "inf", "-inf" and "nan".

`load(path)` reads such a file, or a result CSV (whose `samples_ms` column holds the same samples;
older CSVs have none), into `RawRecord`s: one reader for the gate and for the history database.
"""

from __future__ import annotations

import functools
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nnbench import results, safeio
from nnbench.errors import NnbenchError
from nnbench.version import __version__

FORMAT = "nnbench-results"
SCHEMA_VERSION = 2  # 2: a record's `workload` was `suite` in 1 (read as today's: results.upgrade_row)
SCHEMA_PATH = Path(__file__).parent / "schema" / "results.schema.json"


@dataclass
class RawRecord:
    """One case's record: `fields` is the flat record (results.FIELDS, numbers as floats, empty as
    None); `samples_ms` its kept samples (None where the file has none: a CSV from before raw samples
    were kept, or a case that never ran)."""

    fields: dict
    samples_ms: np.ndarray | None = None
    reps: int | None = None
    unit: str | None = None
    batch: int | None = None
    dropped: int = 0
    line: int = 0  # where it was read (1-based), for messages
    extra: dict = field(default_factory=dict)

    @property
    def key(self) -> str:
        """The case key (results.case_key_of): what makes two records the same case."""
        return results.case_key_of(self.fields)

    @property
    def status(self) -> str | None:
        return self.fields.get("status")


# -- writing --------------------------------------------------------------------------------------
# What a file's lines are (docs/JSON.md: one kind per file).
KINDS = ("results", "profile", "devices", "check", "history-record", "history")


def header(kind: str = "results") -> dict:
    import datetime as dt
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r}: the schema knows {', '.join(KINDS)}")
    return {"format": FORMAT, "schema_version": SCHEMA_VERSION, "kind": kind, "nnbench_version": __version__,
            "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}


def write_document(path, kind: str, lines: list[dict]) -> Path:
    """A whole `--json FILE` of one kind at once (a command whose output exists only at its end: a
    profile, the device list, the gate's verdicts): the header, then one line per object. A new file
    only (safeio), written under its lock; returns where it went."""
    text = json.dumps(header(kind)) + "\n" + "".join(
        json.dumps(_jsonable(obj), allow_nan=False, separators=(",", ":")) + "\n" for obj in lines)
    path, fd = safeio.open_locked(Path(path))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise safeio.os_problem(path, e) from None
    return path


def to_json(record: dict) -> dict:
    """A record as its JSON line's object: the CSV columns typed, the samples grouped."""
    out = {k: _jsonable(record.get(k)) for k in results.FIELDS if k != "samples_ms"}
    ms = record.get("samples_ms")
    batch = record.get("batch")
    out["raw"] = None if not ms else {
        "ms": [float(f"{x:.7g}") for x in ms], "reps": int(record.get("reps") or 1),
        "unit": record.get("unit") or "launch", "batch": int(batch) if batch not in (None, "") else None,
        "dropped": int(record.get("dropped") or 0)}
    return out


def _jsonable(v):
    if v is None:
        return None
    if isinstance(v, bool | np.bool_):
        return bool(v)
    if isinstance(v, int | np.integer):
        return int(v)
    if isinstance(v, float | np.floating):
        v = float(v)
        return v if math.isfinite(v) else ("nan" if math.isnan(v) else "inf" if v > 0 else "-inf")
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, BaseException):
        return str(v)
    return v if isinstance(v, str) else str(v)


class JsonSink(results.LineSink):
    """The `--json FILE` writer: a header line, then one record per finished case (see LineSink for
    the guarantees, the same as the CSV's). Adding to an existing file (a resumed sweep) needs that
    file to be an nnbench results file of this schema version."""

    def __init__(self, path, mode: str = safeio.NEW, flag: str | None = "--force") -> None:
        super().__init__(Path(path), mode, flag)

    def header(self) -> str:
        return header_line()

    def check_existing(self) -> None:
        with open(self.path, encoding="utf-8", errors="replace") as f:
            first = f.readline()
        if check_header(self.path, first)["schema_version"] < SCHEMA_VERSION:
            # its records would say `suite` and the added ones `workload`: one file, two schemas
            raise NnbenchError(f"{self.path}: written by an older nnbench (schema_version "
                               f"{json.loads(first)['schema_version']}); it loads, but records are added only to a "
                               f"file of schema_version {SCHEMA_VERSION}: name a new --json file")

    def line(self, record: dict) -> str:
        return line(record)


def header_line(kind: str = "results") -> str:
    """A JSON results file's first line."""
    return json.dumps(header(kind)) + "\n"


def line(record: dict) -> str:
    """One record as a line of a JSON results file."""
    return json.dumps(to_json(record), allow_nan=False, separators=(",", ":")) + "\n"


def check_header(path, first_line: str, kind: str = "results") -> dict:
    try:
        head = json.loads(first_line)
    except ValueError:
        head = None
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise NnbenchError(f"{path}:1: not an nnbench JSON results file (its first line is not the "
                           f'{{"format": "{FORMAT}", ...}} header)')
    version = head.get("schema_version")
    if not isinstance(version, int) or version < 1:
        raise NnbenchError(f"{path}:1: schema_version {version!r}: expected an integer >= 1")
    if version > SCHEMA_VERSION:
        raise NnbenchError(f"{path}:1: schema_version {version} is newer than this nnbench reads "
                           f"({SCHEMA_VERSION}); upgrade nnbench")
    found = head.get("kind", "results")  # files from before kinds existed hold results
    if found != kind:
        raise NnbenchError(f"{path}:1: a {found!r} file (nnbench {found}), not {kind}")
    return head


# -- reading --------------------------------------------------------------------------------------
def is_json(path) -> bool:
    """Whether `path` is a JSON results file (by its first byte), rather than a CSV."""
    safeio.readable(path, "result file")
    try:
        with open(path, "rb") as f:
            return f.read(1) == b"{"
    except FileNotFoundError:
        raise NnbenchError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise NnbenchError(f"{path}: is a folder, not a result file") from None
    except OSError as e:
        raise safeio.os_problem(path, e, "cannot read") from None


def load(path, notes: list[str] | None = None, times: bool = True) -> list[RawRecord]:
    """Every record of a JSON results file or a result CSV, in file order. A last line cut short by
    a kill is set aside (and said in `notes`); any other damage is one NnbenchError naming the line."""
    path = Path(path)
    return _load_json(path, notes, times) if is_json(path) else _load_csv(path, notes, times)


def _load_json(path: Path, notes, times: bool = True) -> list[RawRecord]:
    text = safeio.read_text(path, "result file")
    lines = text.split("\n")
    check_header(path, lines[0])
    out = []
    for i, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            if i == len(lines) or (i == len(lines) - 1 and not lines[-1]):  # the last line: cut short by a kill
                if notes is not None:
                    notes.append(f"{path}:{i}: a last line cut short (a killed run?) was set aside")
                continue
            raise NnbenchError(f"{path}:{i}: not a JSON object; the file is damaged") from None
        if not isinstance(obj, dict):
            raise NnbenchError(f"{path}:{i}: not a JSON object; the file is damaged")
        out.append(_record(path, i, obj, times))
    return out


def _record(path, line: int, obj: dict, times: bool = True) -> RawRecord:
    samples = obj.pop("raw", None)
    for k, v in obj.items():  # every field of a record is a number, text, a boolean or null (the schema)
        if isinstance(v, list | dict):
            raise NnbenchError(f"{path}:{line}: {k}: a JSON {'array' if isinstance(v, list) else 'object'} where "
                               "the schema has a number, text, a boolean or null")
    if obj.get("status") is not None and obj["status"] not in results.STATUSES:
        raise NnbenchError(f"{path}:{line}: status {obj['status']!r}: expected one of "
                           f"{', '.join(sorted(results.STATUSES))}")
    fields = results.upgrade_row({k: _number(k, v) for k, v in obj.items()})
    if (why := results.damaged_cell(fields, times)) is not None:
        raise NnbenchError(f"{path}:{line}: {why}")
    rec = RawRecord(fields, line=line)
    if samples is not None:
        ms = samples.get("ms") if isinstance(samples, dict) else None
        if not isinstance(ms, list) or not all(isinstance(x, int | float) and not isinstance(x, bool)
                                               and 0 <= x < math.inf for x in ms):
            raise NnbenchError(f"{path}:{line}: raw.ms must be a list of finite sample times in ms >= 0")
        rec.samples_ms = np.asarray(ms, dtype=np.float64)
        rec.reps, rec.unit = samples.get("reps"), samples.get("unit")
        rec.batch, rec.dropped = samples.get("batch"), _count(path, line, "raw.dropped", samples.get("dropped"))
    return rec


def _count(path, line: int, key: str, v) -> int:
    """A count of samples (raw.dropped): a whole number >= 0 (null or absent: 0), else one line naming it."""
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0 or v != int(v):
        raise NnbenchError(f"{path}:{line}: {key} {v!r}: expected a whole number >= 0")
    return int(v)


def _number(key: str, v):
    if isinstance(v, str) and v in ("inf", "-inf", "nan") and key in results.NUMERIC:
        return float(v)
    return v


def _load_csv(path: Path, notes, times: bool = True) -> list[RawRecord]:
    import csv
    out = []
    try:
        results.scan_csv(path, times)
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            if not reader.fieldnames or not {"workload", *results.OLD_COLUMNS} & set(reader.fieldnames):
                raise NnbenchError(f"{path}: not an nnbench result CSV (no header with a workload column)")
            for i, row in enumerate(reader, start=2):
                if row.get("status") not in results.STATUSES:
                    if notes is not None:
                        notes.append(f"{path}:{i}: a row without a valid status (cut short?) was set aside")
                    continue
                try:
                    fields = results.upgrade_row(results.parse_row(row))
                except NnbenchError as e:
                    raise NnbenchError(f"{path}:{i}: {e}") from None
                ms = fields.pop("samples_ms", None)
                rec = RawRecord(fields, line=i)
                if ms:
                    rec.samples_ms = np.asarray(ms, dtype=np.float64)
                    rec.reps = int(float(row.get("reps") or 1))
                    rec.unit = row.get("unit") or None
                    rec.batch = int(float(row["batch"])) if row.get("batch") else None
                    rec.dropped = int(float(row.get("dropped") or 0))
                out.append(rec)
    except (UnicodeDecodeError, csv.Error) as e:
        raise NnbenchError(f"{path}: not a result CSV ({e})") from None
    except FileNotFoundError:
        raise NnbenchError(f"{path}: no such file") from None
    except OSError as e:
        raise safeio.os_problem(path, e, "cannot read") from None
    return out


def typed(fields: dict) -> dict:
    """A record read from a CSV (numbers as floats, the rest as text) with each field of integer or
    boolean type in the schema made one again, as a record written straight from a run has it."""
    props = _record_properties()
    out = dict(fields)
    for k, v in fields.items():
        types = props.get(k, {}).get("type", ())
        if isinstance(v, str) and "boolean" in types and v in ("True", "False"):
            out[k] = v == "True"
        elif "integer" in types and isinstance(v, str | float) and not isinstance(v, bool):
            try:
                f = float(v)
            except ValueError:
                continue
            if f.is_integer():
                out[k] = int(f)
    return out


@functools.cache
def _record_properties() -> dict:
    return schema()["$defs"]["record"]["properties"]


def schema() -> dict:
    """The JSON Schema of one line of any `--json` file (a header, or a line of its kind)."""
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def open_sink(csv_path, name: str, gpu: str, fields: list[str], force: bool = False, json_path=None):
    """The sink of a command's `--csv` option: a new file (or, with --force, a replaced one), or a
    new default name under results/ when the option is not given; with `json_path` (`--json`), the
    same records with their raw samples also go to that JSON Lines file (nnbench/rawresults.py)."""
    mode = safeio.FORCE if force else safeio.NEW
    sink = results.CsvSink(csv_path, mode=mode, fields=fields) if csv_path else \
        results.CsvSink(results.default_path(name, gpu), mode=safeio.UNIQUE, fields=fields)
    if json_path is None:
        return sink
    try:
        return results.Sinks(sink, JsonSink(json_path, mode=mode))
    except BaseException:
        sink.close()
        if not force:  # the CSV was made a moment ago, for this run alone: a refused --json leaves no file behind
            Path(sink.path).unlink(missing_ok=True)
        raise
