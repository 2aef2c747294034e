"""The float32 arithmetic's error on the training checks, measured on the CPU (no GPU needed).

For each of Nets 1-8 with its settings (configs/nets.yaml), runs the check's math in float32 with
NumPy and compares the weight changes with the float64 reference, exactly as the GPU checks do:
  per-sample  mlp.CHECK_ITERATIONS samples (mlp.reference_weights in float32);
  mini-batch  batched.CHECK_STEPS steps at each --batch given (batched.reference_weights in float32).
Each is measured for several seeds and two summation orders (the BLAS product as written, and on
the reversed inputs), since a GPU kernel sums in yet another order. Writes a CSV to stdout.

    python lab/scripts/float32_check_error.py --seeds 0 1 2 3 4 --batch 256 4096 > lab/data/tolerances/float32.csv

Why a script, not the CLI: measures the check's own float32 error across seeds and summation orders
(lab/journal/tolerances.md); no kernel runs.
"""

from __future__ import annotations

import argparse
import csv
import sys

import numpy as np

from nnbench import nets
from nnbench.workloads.train import batched
from nnbench.workloads.train import mlp


def reversed_order(params):
    """The same weights with the inputs of every layer reversed (bias column kept last), and an
    input permutation to match: the same math, summed in the opposite order."""
    out = []
    for W in params:
        out.append(np.hstack([W[:, :-1][:, ::-1], W[:, -1:]]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--batch", type=int, nargs="*", default=[256, 4096])
    ap.add_argument("--nets", nargs="+", default=[str(i) for i in range(1, 9)])
    args = ap.parse_args()
    w = csv.writer(sys.stdout)
    w.writerow(["check", "net", "layers", "batch", "seed", "order", "weights_rel_err"])
    for name in args.nets:
        net = nets.get(name)
        settings = dict(net.settings)
        for seed in args.seeds:
            hyper = mlp.Hyper.from_settings(settings, seed=seed)
            init, train, _ = mlp.data_sets(net.layers, hyper)
            ref = mlp.reference_weights(init, train, hyper, mlp.CHECK_ITERATIONS)
            for order in ("as-is", "reversed"):
                got = mlp.float32_weights(init, train, hyper, mlp.CHECK_ITERATIONS, reverse=order == "reversed")
                w.writerow(["per-sample", name, "-".join(map(str, net.layers)), 1, seed, order,
                            f"{mlp.weight_change_error(got, ref, init):.4e}"])
            bhyper = mlp.Hyper.from_settings(settings, seed=seed,
                                             rate=settings.get("batch_rate", batched.DEFAULT_RATE))
            for b in args.batch:
                samples = max(batched.DEFAULT_TRAIN_SAMPLES, b * batched.CHECK_STEPS)  # as `train --batch` makes them
                data = batched.training_set(net.layers[0], samples, seed)
                bref = batched.reference_weights(init, data, b, bhyper, batched.CHECK_STEPS)
                for order in ("as-is", "reversed"):
                    got = batched.float32_weights(init, data, b, bhyper, batched.CHECK_STEPS,
                                                  reverse=order == "reversed")
                    w.writerow(["mini-batch", name, "-".join(map(str, net.layers)), b, seed, order,
                                f"{mlp.weight_change_error(got, bref, init):.4e}"])
            sys.stdout.flush()


if __name__ == "__main__":
    main()
