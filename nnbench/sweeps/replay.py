"""Replay: a sweep answered from a finished result file instead of a GPU (Kernel Tuner's simulation mode).

`nnbench sweep CONFIG --replay RESULTS.csv` runs the config's strategy through the real sweep (plan,
device limits, worker, watchdog, records), but its worker looks each case up in RESULTS.csv and
returns that row, so a strategy can be judged against the brute-force answer with no GPU. The
file may be of the current schema or of the one before the workload contract (columns M, N, K and
pct_cublas): only the case's identity, its status and its times are read.

Every case of the config must be in the file: a replay that met an unmeasured case would have to
invent its time, so the config is refused up front with the first missing case named.
"""

from __future__ import annotations

import csv
import time
from pathlib import Path

from nnbench import results, safeio
from nnbench.errors import NnbenchError

NEEDED = ("workload", "variant", "params", "shape", "status", "median_ms")
RENAMED = {"pct_cublas": "pct_vendor"}  # the pre-contract schema's name


def backend_name(path: Path, sleep_ms: float = 0.0, sleep_scale: float = 0.0) -> str:
    """The worker's backend string: `replay:SLEEP_MS:SCALE:PATH`. Each case sleeps SLEEP_MS plus SCALE
    times its recorded median, standing in for its kernel's time (the sharding benchmark, tests)."""
    return f"replay:{sleep_ms:g}:{sleep_scale:g}:{Path(path).resolve()}"


def load(path: Path, workload: str) -> dict[tuple[str, str, str], dict]:
    """The file's rows of `workload` by (variant, params, shape); the last row of a case wins (a resume)."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            columns = [results.OLD_COLUMNS.get(k, k) for k in reader.fieldnames or []]
            missing = [k for k in NEEDED if k not in columns]
            if missing:
                raise NnbenchError(f"--replay {path}: not a result CSV (no {', '.join(missing)} column)")
            rows = {}
            for row in reader:
                rec = results.upgrade_row(results.parse_row({RENAMED.get(k, k): v for k, v in row.items() if k}))
                if rec.get("workload") != workload or rec.get("status") not in results.STATUSES:
                    continue
                rows[(rec["variant"], _params(rec), rec["shape"])] = rec
    except (UnicodeDecodeError, csv.Error) as e:
        raise NnbenchError(f"--replay {path}: not a result CSV ({e})") from None
    except OSError as e:
        raise safeio.os_problem(path, e, "--replay: cannot read") from None
    if not rows:
        raise NnbenchError(f"--replay {path}: no finished {workload} rows")
    return rows


def _params(rec: dict) -> str:
    """A vendor row's params text says how the library was called; its identity is the variant."""
    step = str(rec.get("step") if rec.get("step") is not None else "")
    return "" if step in ("", "nan") else (rec.get("params") or "").split(" · ")[0]


def check_space(spec, rows: dict, path: Path) -> None:
    """Refuse a config whose cases the file does not hold (see the module doc)."""
    missing = [(c, s) for s in spec.shapes for c in spec.cases if spec.workload.applies(c, s)
               and (c.variant.name, c.param_label, s.label) not in rows]
    if missing:
        c, s = missing[0]
        raise NnbenchError(f"--replay {path}: {len(missing)} cases of {spec.path} are not in the file, e.g. "
                           f"{c.variant.name} {c.param_label} at {s.label}; replay a file of the same config")


class ReplaySession:
    """The worker's session in replay mode: each job's row, as it was recorded."""

    def __init__(self, path: Path, workload: str, sleep_ms: float, env_extra: dict, sleep_scale: float = 0.0
                 ) -> None:
        self.rows = load(path, workload)
        self.sleep_s, self.sleep_scale = sleep_ms / 1e3, sleep_scale
        first = next(iter(self.rows.values()))
        self.env = {k: first.get(k) for k in results.ENVIRONMENT}
        self.env.update(env_extra, gpu=f"replay of {first.get('gpu') or 'unknown'}")
        cc = str(first.get("cc") or "")
        self.arch = f"sm_{cc.replace('.', '')}" if cc.replace(".", "").isdigit() else None
        from nnbench.runtime.device import for_arch
        self.device = for_arch(self.arch) if self.arch else None

    @classmethod
    def from_backend(cls, name: str, workload: str, env_extra: dict) -> ReplaySession:
        _, sleep_ms, scale, path = name.split(":", 3)
        return cls(Path(path), workload, float(sleep_ms), env_extra, float(scale))

    def warm_up(self) -> None:
        pass

    def prepare(self, problem, following=None) -> None:
        pass

    def _row(self, variant: str, params: str, shape) -> dict:
        row = self.rows.get((variant, params, shape.label))
        if self.sleep_s or self.sleep_scale:
            time.sleep(self.sleep_s + self.sleep_scale * ((row or {}).get("median_ms") or 0.0) / 1e3)
        if row is None:
            return {"variant": variant, "params": params, "shape": shape.label, "status": "ERROR",
                    "error": "replay: this case is not in the replayed file"}
        return {k: v for k, v in row.items() if k not in results.ENVIRONMENT and v is not None}

    def run_vendor(self, name: str, shape) -> dict | None:
        return self._row(name, "", shape) if (name, "", shape.label) in self.rows else None

    def run_case(self, case, shape, compiled=None) -> dict:
        return self._row(case.variant.name, case.param_label, shape)
