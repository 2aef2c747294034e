"""The GPU versions' check errors against the limits derived from the float32 arithmetic, on Nets 1-8
with their settings (configs/nets.yaml), seed 0: per-sample versions after mlp.CHECK_ITERATIONS
samples, mini-batch versions after batched.CHECK_STEPS steps. Writes a CSV to stdout.

    python lab/scripts/gpu_check_error.py --batch 256 > lab/data/tolerances/gpu_h100.csv

Why a script, not the CLI: reports every GPU version's check error against the derived limit, for
the tolerance write-up.
"""

from __future__ import annotations

import argparse
import csv
import sys

from nnbench import nets
from nnbench.errors import NnbenchError
from nnbench.runtime import open_backend
from nnbench.workloads.train import batched
from nnbench.workloads.train import mlp


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nets", nargs="+", default=[str(i) for i in range(1, 9)])
    ap.add_argument("--batch", type=int, default=256)
    args = ap.parse_args()
    be, _ = open_backend("cuda")
    w = csv.writer(sys.stdout)
    w.writerow(["check", "net", "version", "batch", "weights_rel_err", "float32_rel_err", "ratio", "rtol", "status"])
    per_sample = [(v, v.defaults()) for v in mlp.versions("cuda")]
    compiled = mlp.compile_versions(be.arch, per_sample)
    batched_versions = [v for v in batched.versions("cuda") if "cublas" not in v.tags]
    bcomp = {v.name: batched.compile_version(be.arch, v) for v in batched_versions}
    for name in args.nets:
        net = nets.get(name)
        settings = dict(net.settings)
        hyper = mlp.Hyper.from_settings(settings)
        init, train, _ = mlp.data_sets(net.layers, hyper)
        rtol = mlp.check_tolerance(init, train, hyper)
        for v, p in per_sample:
            try:
                err = mlp.check_version(be, v, p, compiled[v.name], net.layers, init, train, hyper)
            except NnbenchError as e:  # fused refuses a net it cannot hold
                w.writerow(["per-sample", name, v.name, 1, "", "", "", rtol, f"SKIP: {e}"])
                continue
            w.writerow(["per-sample", name, v.name, 1, f"{err:.4e}", f"{rtol / mlp.CHECK_FACTOR:.4e}",
                        f"{err * mlp.CHECK_FACTOR / rtol:.2f}", f"{rtol:.4e}", "PASS" if err <= rtol else "FAIL"])
        sys.stdout.flush()
        bh = mlp.Hyper.from_settings(settings, rate=settings.get("batch_rate", batched.DEFAULT_RATE))
        data = batched.training_set(net.layers[0], batched.DEFAULT_TRAIN_SAMPLES, hyper.seed)
        brtol = batched.check_tolerance(init, data, args.batch, bh)
        for v in batched_versions:
            bnet = batched.open_net(be, v, bcomp[v.name], net.layers, init, data, args.batch, bh)
            err = batched.check(bnet, init, data, bh)
            w.writerow(["mini-batch", name, v.name, args.batch, f"{err:.4e}", f"{brtol / mlp.CHECK_FACTOR:.4e}",
                        f"{err * mlp.CHECK_FACTOR / brtol:.2f}", f"{brtol:.4e}", "PASS" if err <= brtol else "FAIL"])
        sys.stdout.flush()


if __name__ == "__main__":
    main()
