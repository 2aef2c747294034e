"""How far each mini-batch version's weights drift from the float64 reference as training goes on:
the relative error of the weight changes (mlp.weight_change_error) after 1, 3, 10, 30 and 60 steps,
for every tile set of `batched`, for `batched-cublas`, and for NumPy float32 (batched-numpy).
A version with a bug drifts at once; float32 rounding alone grows slowly, at a rate the net's
dynamics set. Then, to separate a version's own error from the amplification of earlier rounding
by the dynamics, one step from the float64 reference's own state at each checkpoint: the relative
error of the velocities after that step (v = m v + rate g: the step's gradient, free of the
rounding of the weights' float32 storage) against float64's.

Usage: python3 lab/scripts/batched_drift.py NET BATCH   (GPU)

Why a script, not the CLI: the CLI checks a version once, after CHECK_STEPS steps; this follows the
drift step by step, which needs the trainer's state between steps.
"""

import sys

import numpy as np

from nnbench import measure, nets, registry
from nnbench.runtime import open_backend
from nnbench.workloads.train import batched
from nnbench.workloads.train import mlp

CHECKPOINTS = (1, 3, 10, 30, 60)
net, batch = nets.get(sys.argv[1]), int(sys.argv[2])
be, _ = open_backend("cuda")
layers = net.layers
st = dict(net.settings)
hyper = mlp.Hyper.from_settings(st, rate=st.get("batch_rate", batched.DEFAULT_RATE))
init = mlp.init_params(layers, 0, hyper.init_scale, hyper.init)
train = batched.training_set(layers[0], batch * CHECKPOINTS[-1], 0)


def steps(params, vel, a, b, dtype):
    for j in range(a, b):
        sl = slice(j * batch, (j + 1) * batch)
        batched.step(params, vel, train.x[sl].astype(dtype), train.t[sl].astype(dtype), dtype(hyper.rate),
                     dtype(hyper.momentum))


refs, vels, f32 = {}, {}, {}
p64, v64 = [W.copy() for W in init], [np.zeros_like(W) for W in init]
p32 = [W.astype(np.float32) for W in init]
v32 = [np.zeros_like(W) for W in p32]
done = 0
for c in CHECKPOINTS:
    steps(p64, v64, done, c, np.float64)
    steps(p32, v32, done, c, np.float32)
    done = c
    refs[c] = [W.copy() for W in p64]
    vels[c] = [v.copy() for v in v64]
    f32[c] = mlp.weight_change_error([W.astype(np.float64) for W in p32], refs[c], init)
print(f"Net {net.name} batch {batch} rate {hyper.rate}: weight-change error against float64 after "
      + ", ".join(map(str, CHECKPOINTS)) + " steps")
print(f"{'batched-numpy (float32)':44s} " + " ".join(f"{f32[c]:9.2e}" for c in CHECKPOINTS))



def one_step(c):
    """The float64 reference's velocities one step after its state at c steps."""
    p, v = [W.copy() for W in refs[c]], [x.copy() for x in vels[c]]
    steps(p, v, c, c + 1, np.float64)
    return v


one = {c: one_step(c) for c in CHECKPOINTS if c < CHECKPOINTS[-1]}
for v in (registry.get("mlp", "batched"), registry.get("mlp", "batched-cublas")):
    for params, comp in batched.compile_version(be.arch, v):
        bn = batched.open_net(be, v, [(params, comp)], layers, init, train, batch, hyper)
        errs, done = [], 0
        for c in CHECKPOINTS:
            for j in range(done, c):
                bn.callable(bn.step_launches(j))()
            done = c
            errs.append(mlp.weight_change_error(bn.weights(init), refs[c], init))
        single = []
        for c in one:
            bn.set_state(refs[c], vels[c])
            bn.callable(bn.step_launches(c))()
            got = bn.velocities(init)
            single.append(measure.rel_err(np.concatenate([g.ravel() for g in got]),
                                          np.concatenate([r.ravel() for r in one[c]])))
        label = v.name + " " + " ".join(f"{k}={x}" for k, x in params.items() if k != "MIN_BLOCKS")
        print(f"{label:44s} " + " ".join(f"{e:9.2e}" for e in errs) + "   one step's velocities from the reference at "
              + ", ".join(f"{c}: {e:.2e}" for c, e in zip(one, single)), flush=True)
