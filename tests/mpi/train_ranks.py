"""Run under mpirun by tests/test_dataparallel.py: batched-numpy trained data-parallel over the
ranks; rank 0 saves the final weights and the error curve to the .npz named by argv[1]."""

import sys

import numpy as np

from nnbench import glyphs, nets
from nnbench.runtime import exchange
from nnbench.suites import batched, mlp

w = exchange.world()
layers = nets.get(1).layers
hyper = mlp.Hyper(rate=3.0, momentum=0.8)
init = mlp.init_params(layers, 0, 4.0)
train = batched.training_set(layers[0], 960, seed=0)
test = glyphs.noisy(layers[0], 1, seed=1)
out = batched.train_numpy(layers, init, train, test, 96, 2, hyper, exchange=exchange.CpuExchange(w), rank=w.rank,
                          ranks=w.size)
if w.rank == 0:
    np.savez(sys.argv[1], *out.weights, curve=np.array([e for _, e in out.error_curve]))
