"""Time every shipped GEMM parameter set (configs/gemm.yaml) at one size, cuBLAS first.

Used to pick each step's default parameters; prints the ladder table and writes a CSV.
    python3 lab/scripts/gemm_configs.py --size 4096 --csv results/configs.csv

Why a script, not the CLI: times configs/gemm.yaml's hand-picked parameter sets (a list, not the
product of axes that a sweep expands).
"""

import argparse

from rich.console import Console

from nnbench import harness, measure, paths, results
from nnbench.sweeps import config
from nnbench.report import tables
from nnbench.runtime import open_backend
from nnbench.workloads.gemm import session as gemm

ap = argparse.ArgumentParser()
ap.add_argument("--size", type=int, default=4096)
ap.add_argument("--budget", type=float, default=0.5)
ap.add_argument("--variant", action="append")
ap.add_argument("--csv", default=None)
a = ap.parse_args()
be, _ = open_backend("cuda")
cfg = config.load_gemm(paths.CONFIGS / "gemm.yaml")
cases = [c for c in cfg.cases if not a.variant or c.variant.name in a.variant]
env = results.environment(be)
sink = results.CsvSink(a.csv or results.default_path("gemm-configs", env["gpu"]))
recs = []
for r in harness.run(gemm.WORKLOAD, be, cases, [gemm.Shape(a.size, a.size, a.size)],
                     measure.TimingSettings(budget_s=a.budget), gemm.DEFAULT_RTOL, env=env):
    sink.append(r)
    recs.append(r)
sink.close()
Console(width=180).print(tables.gemm_table(recs, f"shipped parameter sets at {a.size}^3 on {env['gpu']}"))
