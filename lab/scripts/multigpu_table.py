"""The markdown table of lab/scripts/multigpu.sh's CSVs (lab/journal/multigpu.md): every row of every run
with the per-step split (compute: the same step without its allreduces, timed as the step; exposed
communication: the step minus that) and the scaling efficiency against one GPU: weak at the same
per-GPU batch (T1 / TN), strong at the same global batch (T1 / (N TN)); ours against our 1-GPU row,
PyTorch DDP against the 1-GPU PyTorch eager row. Usage: python3 lab/scripts/multigpu_table.py OUTDIR

Why a script, not the CLI: it joins the rows of several runs (one per GPU count and bucket size)."""

from __future__ import annotations

import csv
import glob
import sys
from pathlib import Path


def num(r: dict, key: str) -> float | None:
    try:
        return float(r[key])
    except (KeyError, TypeError, ValueError):
        return None


def fmt(v: float | None, spec: str = ",.1f") -> str:
    return "—" if v is None else format(v, spec)


def main(out: str) -> None:
    rows = []
    for path in sorted(glob.glob(f"{out}/*.csv")):
        for r in csv.DictReader(open(path)):
            r["_run"], r["version"] = Path(path).stem, r.get("variant") or r.get("version")
            rows.append(r)
    one = {(r["version"], int(r["batch"])): num(r, "us_per_step") for r in rows
           if int(r.get("ranks") or 1) == 1 and r["status"] == "PASS"}
    print("| run | GPUs | global batch | version | exchange | µs/step | ±IQR | compute µs | exposed µs | allreduce µs "
          "(alone) | buckets | samples/s | weak eff. | strong eff. | check (limit) | status |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        n, b, s = int(r.get("ranks") or 1), int(r["batch"]), num(r, "us_per_step")
        base = "torch-eager" if r["version"] == "torch-ddp" else r["version"]
        weak = one.get((base, b // n)) if n > 1 else None
        strong = one.get((base, b)) if n > 1 else None
        eff_w = f"{100 * weak / s:.1f}%" if weak and s else "—"
        eff_s = f"{100 * strong / (n * s):.1f}%" if strong and s else "—"
        check = (f"{num(r, 'weights_rel_err'):.1e} ({num(r, 'weights_rtol'):.1e})"
                 if num(r, "weights_rel_err") is not None and num(r, "weights_rtol") is not None else "—")
        print(f"| {r['_run']} | {n} | {b:,} | {r['version']} | {r.get('params') or '—'} | {fmt(s)} | "
              f"{fmt(num(r, 'step_iqr_pct'))}% | {fmt(num(r, 'compute_us'))} | {fmt(num(r, 'exposed_us'))} | "
              f"{fmt(num(r, 'comm_us'))} | {r.get('buckets') or '—'} | {fmt(num(r, 'samples_per_s'), ',.0f')} | "
              f"{eff_w} | {eff_s} | {check} | {r['status']}{' ' + r['error'] if r.get('error') else ''} |")


if __name__ == "__main__":
    main(sys.argv[1])
