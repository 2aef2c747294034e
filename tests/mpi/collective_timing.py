"""Run under mpirun by tests/test_collective_timing.py: measure.measure_collective over real MPI ranks on the
CPU backend, timing a launch that holds an MPI allreduce (as a data-parallel step holds NCCL's). The
ranks' stop rules part on purpose: rank 0 takes any noise (alone it stops at min_samples), rank 1 none
(alone it runs to its budget); every rank writes how often it called the collective, its sample count and
timing to argv[1].RANK. A mismatch leaves one rank's last allreduce without a partner: mpirun hangs or
fails."""

import sys
import time

import numpy as np
from mpi4py import MPI

from nnbench import measure
from nnbench.runtime import exchange
from nnbench.runtime.cpu import CpuBackend

w = exchange.world()
calls = [0]
part = np.ones(4)
rng = np.random.default_rng(w.rank)


def launch():
    calls[0] += 1
    if w.rank == 1:
        time.sleep(float(rng.uniform(0, 2e-4)))  # a noisy rank: its samples spread
    w.comm.Allreduce(MPI.IN_PLACE, part, op=MPI.SUM)


stats = measure.measure_collective(CpuBackend(), launch, w, measure.TimingSettings(
    budget_s=0.05, min_samples=5, max_noise=1e9 if w.rank == 0 else 0.0))
with open(f"{sys.argv[1]}.{w.rank}", "w") as f:
    f.write(f"{calls[0]} {stats.samples} {stats.timing}\n")
