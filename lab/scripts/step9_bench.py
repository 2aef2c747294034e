"""Ladder step 9 on the lent GPU in one call: verify and time steps 8 and 9 (3xTF32 and TF32) beside
cuBLAS SGEMM on the target size, the CI shapes, Net 8's training GEMMs at batch 4096 and the odd
shapes; one CSV and a compact table.

    python3 lab/scripts/step9_bench.py OUT.csv [--quick] [--shapes 4096,ci,net8,odd,MxNxK] [-v VARIANT ...]
                                   [--sets 'NAME=V,NAME=V;NAME=V']

Why a script, not the CLI: verifies and times step 9's precisions and fallback paths on named shape
groups in one device call while it is being tuned.
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd

from nnbench import harness, measure, nets, registry
from nnbench.runtime import open_backend
from nnbench.workloads.gemm import session as gemm
from nnbench.workloads.base import Case

ODD = [(1, 1, 1), (7, 9000, 13), (4097, 129, 1), (257, 511, 1023), (1002, 300, 1024), (127, 255, 63)]
CI = [(1000, 777, 1234), (2048, 2048, 2048), (500, 4096, 500)]


def shapes(groups: list[str]) -> list[gemm.Shape]:
    out = []
    for g in groups:
        if g == "4096":
            out.append((4096, 4096, 4096))
        elif g == "ci":
            out += CI
        elif g == "net8":
            out += [(m, n, k) for _, m, n, k in nets.load()["8"].training_gemms(4096)]
        elif g == "odd":
            out += ODD
        else:  # MxNxK
            out.append(tuple(int(x) for x in g.split("x")))
    return [gemm.Shape(*s) for s in dict.fromkeys(out)]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--quick", action="store_true", help="verification only (one sample)")
    ap.add_argument("--shapes", default="4096,ci,net8,odd")
    ap.add_argument("-v", "--variant", action="append")
    ap.add_argument("-p", "--param", action="append", default=[], help="NAME=VALUE override")
    ap.add_argument("--sets", help="parameter sets of tf32x3_wgmma to compare, each 'NAME=V,NAME=V', ';' between: "
                    "any -D macro of the kernel (an experiment's switch too), beside the registry's defaults")
    a = ap.parse_args()
    be, _ = open_backend("cuda")
    settings = measure.TimingSettings(budget_s=0.001, min_samples=1, max_noise=1.0) if a.quick else \
        measure.TimingSettings()
    overrides = {k: int(v) for k, v in (p.split("=") for p in a.param)}
    cases = gemm.plan(a.variant or ["tf32x3", "tf32x3_wgmma", "tf32_wgmma"], overrides, be.device)
    if a.sets:
        v = registry.get("gemm", "tf32x3_wgmma")
        cases = [Case(v, tuple(dict(v.defaults(), **{k: int(x) for k, x in (p.split("=") for p in one.split(","))})
                               .items())) for one in a.sets.split(";")]
    recs = []
    for rec in harness.run(gemm.WORKLOAD, be, cases, shapes(a.shapes.split(",")), settings, gemm.DEFAULT_RTOL,
                           seed=2027, env=be.environment()):
        recs.append(rec)
        print(f"{rec['shape']:>16} {str(rec.get('step', '')):>2} {rec['variant']:<13} "
              f"{rec.get('median_ms', 0):9.4f} ms "
              f"{rec.get('gflops', 0) / 1e3:7.2f} TF/s {rec.get('pct_vendor') or 0:6.1f}% cuBLAS "
              f"err {rec.get('rel_err', float('nan')):.2e} {rec['status']} {rec.get('params', '')} "
              f"{rec.get('error', '')}", flush=True)
        pd.DataFrame(recs).to_csv(a.csv, index=False)  # every row on disk the moment it exists
    return 0 if all(r["status"] in ("PASS", "SKIP") for r in recs) else 1


if __name__ == "__main__":
    sys.exit(main())
