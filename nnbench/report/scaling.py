"""Scaling efficiency of a data-parallel scaling run (`nnbench train --gpus 1,2,4`): its rows in, each row's
weak and strong efficiency against the one-rank rows of the same run, and the table.

weak_eff   = T1(version, B/N) / TN(version, B): the same per-rank batch, so a perfect run keeps the step's time;
strong_eff = T1(version, B) / (N * TN(version, B)): the same global batch, so a perfect run divides it by N.
B is a row's global batch, N its ranks; T1 and TN are steps in µs. PyTorch DDP's rows are set against
PyTorch eager on one GPU (DDP's own one-process form), so each library is measured against itself.
"""

from __future__ import annotations

from rich.table import Table

from nnbench.report.tables import _num, _status

ONE_RANK_OF = {"torch-ddp": "torch-eager"}  # a data-parallel row's reference version on one rank


def _f(v) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if x == x else None


def ranks_of(r: dict) -> int:
    return int(_f(r.get("ranks")) or 1)


def add_efficiency(rows: list[dict]) -> list[dict]:
    """Set weak_eff and strong_eff on every multi-rank row whose one-rank reference passed in the same run
    (None where it is missing); the one-rank rows get 1.0 where they are a reference. In place; returns rows."""
    one = {(r.get("version") or r.get("variant"), int(_f(r.get("batch")))): _f(r.get("us_per_step")) for r in rows
           if ranks_of(r) == 1 and r.get("status") == "PASS" and _f(r.get("us_per_step"))}
    for r in rows:
        n, b, t = ranks_of(r), int(_f(r.get("batch")) or 0), _f(r.get("us_per_step"))
        version = r.get("version") or r.get("variant")
        if n == 1:
            r["weak_eff"] = r["strong_eff"] = 1.0 if (version, b) in one else None
            continue
        base = ONE_RANK_OF.get(version, version)
        weak, strong = one.get((base, b // n)), one.get((base, b))
        r["weak_eff"] = weak / t if weak and t else None
        r["strong_eff"] = strong / (n * t) if strong and t else None
    return rows


def scaling_table(rows: list[dict], title: str) -> Table:
    t = Table(title=title, title_justify="left", header_style="bold", pad_edge=False)
    names = ["ranks", "global batch", "per rank", "version", "µs/step", "±IQR", "kernels µs", "rest µs",
             "exposed µs", "samples/s", "weak eff.", "strong eff.", "speedup", "check", ""]
    for name in names:
        t.add_column(name, justify="left" if name in ("version", "") else "right", no_wrap=name == "version")
    for r in sorted(rows, key=lambda r: (int(_f(r.get("batch")) or 0) // ranks_of(r), ranks_of(r))):
        n, b = ranks_of(r), int(_f(r.get("batch")) or 0)
        weak, strong, iqr = _f(r.get("weak_eff")), _f(r.get("strong_eff")), _f(r.get("step_iqr_pct"))
        t.add_row(str(n), f"{b:,}", f"{b // n:,}", r.get("version") or r.get("variant"),
                  _num(_f(r.get("us_per_step")), ",.1f"), _pct(None if iqr is None else iqr / 100),
                  _num(_f(r.get("kernels_us")), ",.1f"), _num(_f(r.get("rest_us")), ",.1f"),
                  _num(_f(r.get("exposed_us")), ",.1f"), _num(_f(r.get("samples_per_s")), ",.0f"),
                  _pct(weak), _pct(strong), "—" if strong is None else f"{strong * n:.2f}×",
                  _num(_f(r.get("weights_rel_err")), ".1e"), _status(r.get("status", "")))
    return t


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:.1f}%"
