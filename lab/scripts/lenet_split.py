"""LeNet-5's step stage by stage on each path (nnbench/workloads/conv/lenet.py PATHS), for the per-GEMM split
of lab/journal/conv.md: each stage (a layer's forward, its backward, bias and ReLU, the pools, the
loss, the update) timed alone by `measure` after the path's step has passed its float64 check.

    python3 lab/scripts/lenet_split.py OUT.csv [BATCH ...] [--all-implicit]   (on a GPU; default batch 64)
"""

from __future__ import annotations

import csv
import sys

from nnbench import measure
from nnbench.runtime.cuda import CudaBackend
from nnbench.workloads.conv import lenet


def main(out: str, batches: list[int], extra: dict[str, tuple[str, str]]) -> None:
    be = CudaBackend()
    settings = measure.TimingSettings(budget_s=0.15, min_samples=10, max_noise=0.02)
    lenet.PATHS.update(extra)
    fields = ["batch", "path", "stage", "kernels", "median_ms", "step_rel_err"]
    with open(out, "x", newline="") as f:  # row by row: a path that faults loses nothing measured before it
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for batch in batches:
            x, labels = lenet.images(-(-batch // lenet.CLASSES), 0)
            x, labels = x[:batch], labels[:batch]
            params = lenet.init_params(0)
            ref_loss, ref_params, _ = lenet.reference_step(params, x, labels, 0.05)
            for path in lenet.PATHS:
                net = lenet.GpuLeNet(be, params, x, labels, 0.05, path)
                err = lenet.first_step_error(net, net.callable(net.step_launches), params, ref_loss, ref_params)
                for stage, ms, kernels in lenet.stage_times(net, settings):
                    w.writerow(dict(batch=batch, path=path, stage=stage, kernels=kernels, median_ms=f"{ms:.5f}",
                                    step_rel_err=f"{err:.2e}"))
                    f.flush()
                    print(f"{batch:5d} {path:22s} {stage:36s} {kernels:3d} {1e3 * ms:9.2f} us", flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    # --all-implicit: also the fully connected layers on the implicit kernels (not one of lenet.PATHS)
    extra = {"implicit-fc-implicit": ("implicit", "implicit")} if "--all-implicit" in args else {}
    args = [a for a in args if a != "--all-implicit"]
    main(args[0], [int(b) for b in args[1:]] or [64], extra)
