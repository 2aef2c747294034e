"""A soak worker (nnbench/sweeps/soakpool.py) with a defect planted before it starts, for tests/test_soak_gpus.py:
a monkeypatch in the test's process does not reach the worker processes. NNBENCH_SOAK_PLANT says which:
  flaky  - the NumPy GEMM off by 1e-4 where A's first element is above 0.9 (a few draws in ten fail);
  die    - the process exits (code 3) as it starts the GEMMs of its second seed;
  slow   - each seed's GEMM problems take 0.3 s more to make."""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from nnbench.sweeps import soak, soakpool
from nnbench.workloads.gemm import session as gemm_session


def flaky_launcher(honest):
    """`honest` (gemm session's _numpy_launcher) with the draw-dependent defect: C off by 1e-4 where A's first
    element is above 0.9."""
    def planted(bufs, alpha, beta):
        run_it = honest(bufs, alpha, beta)

        def launch():
            run_it()
            if abs(bufs.A.flat[0]) > 0.9:
                bufs.C *= np.float32(1 + 1e-4)
        return launch
    return planted


def dies_or_sleeps(how: str) -> None:
    honest, seen = soak.problems, []

    def planted(workload: str, seed: int = 0) -> list:
        if workload == "gemm":
            seen.append(seed)
            if how == "die" and len(seen) == 2:
                os._exit(3)
            if how == "slow":
                time.sleep(0.3)
        return honest(workload, seed)
    soak.problems = planted


if __name__ == "__main__":
    plant = os.environ.get("NNBENCH_SOAK_PLANT", "")
    if plant == "flaky":
        gemm_session._numpy_launcher = flaky_launcher(gemm_session._numpy_launcher)
    elif plant:
        dies_or_sleeps(plant)
    soakpool.main(sys.argv[1:])
