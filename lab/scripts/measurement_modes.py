"""Do some GEMMs' per-process modes at 2048^3 (warptile: 0 or +2.4-3.0% between fresh runs of configs/ci.yaml,
lab/journal/measurement.md) follow where the operands lie in memory? In ONE process: the same kernels timed on
several placements of A, B and C (each a fresh allocation behind a spacer of random size; the earlier ones stay
allocated, so every placement is new memory), each placement timed twice. If the medians split into the runs'
modes across placements and agree within a placement, the modes are the operands' placement, not the process.

  python3 lab/scripts/measurement_modes.py OUT.jsonl [--placements 12] [--variants naive,vectorized,warptile]

One JSON line per (placement, round, variant): the median (ms), reps, samples, the operands' addresses. ci.yaml's
timing (0.25 s budget, 20 samples, 1% noise). Needs the CUDA backend (the lent GPU).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from nnbench import measure  # noqa: E402
from nnbench.runtime import open_backend  # noqa: E402
from nnbench.workloads import gemm  # noqa: E402

CI_TIMING = measure.TimingSettings(budget_s=0.25, min_samples=20, max_noise=0.01)


def option(name: str, default: str) -> str:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def main() -> None:
    out = Path(sys.argv[1])
    placements = int(option("--placements", "12"))
    names = option("--variants", "naive,vectorized,warptile").split(",")
    backend, _ = open_backend("cuda")
    shape = gemm.Shape(2048, 2048, 2048)
    cases = gemm.plan(names, {}, backend.device)
    compiled = gemm.WORKLOAD.compile(backend.arch, cases)
    kernels = {c: backend.load(compiled[c], c.variant.kernel) for c in cases}
    rng = np.random.default_rng(1)
    host = [rng.standard_normal((shape.M, shape.K)).astype(np.float32),
            rng.standard_normal((shape.K, shape.N)).astype(np.float32),
            np.zeros((shape.M, shape.N), np.float32)]
    held = []  # every placement's buffers stay allocated: the next one is new memory
    with out.open("w") as f:
        for p in range(placements):
            held.append(backend.alloc(int(rng.integers(1, 64)) << 20))  # a spacer of 1-63 MiB
            bufs = [backend.upload(h) for h in host]
            held += bufs
            ptrs = [backend.ptr(b) for b in bufs]
            for rnd in range(2):
                for c in cases:
                    launch_for, _ = gemm.gemm_launch(backend, kernels[c], c.variant, c.param_dict, shape, *ptrs)
                    s = measure.measure(backend, launch_for(1.0, 0.0), CI_TIMING)
                    f.write(json.dumps(dict(placement=p, round=rnd, variant=c.variant.name, median_ms=s.median_ms,
                                            reps=s.reps, samples=s.samples, sm_clock_mhz=s.sm_clock_mhz,
                                            ptrs=[hex(x) for x in ptrs])) + "\n")
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    for name in names:
        med = np.array([r["median_ms"] for r in rows if r["variant"] == name]).reshape(placements, 2)
        rel = 100 * (med / np.median(med) - 1)
        print(f"{name:12s} " + "  ".join(f"{a:+.1f}/{b:+.1f}" for a, b in rel))


if __name__ == "__main__":
    main()
