"""The data-parallel path on ONE GPU: a world of one MPI rank (mpi4py's singleton) trains Net N with
the gradient exchange in place (NCCL over one rank: the side stream, its events, every bucket's
pass and allreduce), one bucket and in buckets, and the PyTorch DDP row over the same world; each
row checked against float64 as in a multi-GPU run. Usage: python3 lab/scripts/dp_one_rank.py OUT.csv
[NET] [BATCH] [BUCKET_MB...] (versions: $VERSIONS, default batched-wgmma)

Why a script, not the CLI: `--gpus 1` trains without an exchange (there is nothing to exchange), so
the CLI never builds a world of one rank; this is the 1-GPU check of the multi-GPU code before a
several-GPU machine is spent on it."""

from __future__ import annotations

import csv
import os
import sys

from mpi4py import MPI

from nnbench import nets, registry, results
from nnbench.runtime import exchange
from nnbench.runtime.cuda import CudaBackend
from nnbench.workloads.train import batched
from nnbench.workloads.train import mlp

out = sys.argv[1]
net = sys.argv[2] if len(sys.argv) > 2 else "8"
batch = int(sys.argv[3]) if len(sys.argv) > 3 else 4096
buckets = [float(b) for b in sys.argv[4:]] or [0.0, exchange.DEFAULT_BUCKET_MB]
be = CudaBackend(0)
world = exchange.World(MPI.COMM_WORLD, 0, 1, 0)
layers = nets.get(net).layers
settings = dict(nets.load()[net].settings)
hyper = mlp.Hyper.from_settings(settings, rate=settings.get("batch_rate", batched.DEFAULT_RATE))
chosen = [(registry.get("mlp", name), {}) for name in os.environ.get("VERSIONS", "batched-wgmma").split()]
env = results.environment(be)
rows = []
for i, mb in enumerate(buckets):
    modes = ("ddp",) if i == len(buckets) - 1 else ()
    for rec in batched.run(be, chosen, layers, hyper, batch, epochs=1, train_samples=4 * batch, test_per_letter=2,
                           torch_modes=modes, env=env, world=world, bucket_mb=mb):
        rec.pop("_outcome", None)
        rec["bucket_mb"] = mb
        rows.append(rec)
        print(f"bucket_mb={mb:g} {rec['version']:14s} {rec['status']} err={rec.get('weights_rel_err')} "
              f"limit={rec.get('weights_rtol')} us/step={rec.get('us_per_step')} compute={rec.get('compute_us')} "
              f"exposed={rec.get('exposed_us')} allreduce={rec.get('comm_us')} buckets={rec.get('buckets')} "
              f"launches={rec.get('launches_per_step')} {rec.get('error') or ''}", flush=True)
with open(out, "w", newline="") as f:
    keys = list(dict.fromkeys(k for r in rows for k in r))
    w = csv.DictWriter(f, keys)
    w.writeheader()
    w.writerows(rows)
failed = [r for r in rows if r["status"] != "PASS"]
sys.exit(1 if failed else 0)
