"""Run under mpirun by tests/test_dataparallel.py and tests/test_buckets.py: batched-numpy trained
data-parallel over the ranks (argv[2], if given: the bucket cap in floats); rank 0 saves the final
weights, the error curve and the number of buckets to the .npz named by argv[1]."""

import sys

import numpy as np

from nnbench import glyphs, nets
from nnbench.runtime import exchange
from nnbench.workloads.train import batched, mlp

w = exchange.world()
layers = nets.get(1).layers
hyper = mlp.Hyper(rate=3.0, momentum=0.8)
init = mlp.init_params(layers, 0, 4.0)
train = batched.training_set(layers[0], 960, seed=0)
test = glyphs.noisy(layers[0], 1, seed=1)
cap = int(sys.argv[2]) if len(sys.argv) > 2 else 0
out = batched.train_numpy(layers, init, train, test, 96, 2, hyper, exchange=exchange.CpuExchange(w), rank=w.rank,
                          ranks=w.size, bucket_cap=cap)
if w.rank == 0:
    buckets = len(exchange.plan_buckets([W.size for W in init], cap))
    np.savez(sys.argv[1], *out.weights, curve=np.array([e for _, e in out.error_curve]), buckets=buckets)
