"""Per-role times of one mini-batch step for every tile set the batched version is compiled for
(registry candidates), beside cuBLAS: what `batched.tune` chooses from, printed in full.

Usage: python3 lab/scripts/batched_tiles.py NET BATCH   (GPU)

Why a script, not the CLI: times every tile set per GEMM role inside one step; the sweep sees whole
steps, not roles.
"""

import sys

from nnbench import nets, registry
from nnbench.runtime import open_backend
from nnbench.workloads.train import batched
from nnbench.workloads.train import mlp

net, batch = nets.get(sys.argv[1]), int(sys.argv[2])
be, _ = open_backend("cuda")
layers = net.layers
hyper = mlp.Hyper.from_settings(dict(net.settings), rate=0.3)
init = mlp.init_params(layers, 0, hyper.init_scale, hyper.init)
train = batched.training_set(layers[0], batch, 0)
for v in (registry.get("mlp", "batched"), registry.get("mlp", "batched-cublas")):
    for params, comp in batched.compile_version(be.arch, v):
        bn = batched.open_net(be, v, [(params, comp)], layers, init, train, batch, hyper)
        launches = bn.step_launches(0)
        bn.callable(launches)()
        roles = batched.role_times(be, launches)
        label = " ".join(f"{k}={x}" for k, x in params.items() if k != "MIN_BLOCKS") or "cuBLAS"
        splits = sorted({s for s, _ in bn.slices}) if bn.gemms else "-"
        print(f"{label:32s} " + " ".join(f"{k} {x:8.1f}" for k, x in roles.items()) + f"  split-K {splits}",
              flush=True)
