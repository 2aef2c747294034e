"""A persistent trainer (fused, fused-partials or fused-barrier) across grid sizes and parameter
sets: the weight check against the float64 reference, then microseconds per training iteration
over a fixed number of iterations (no early stop) and per feedforward.
    python3 lab/scripts/fused_grid.py VERSION NETS ITERATIONS BLOCKS[,BLOCKS...] [PARAMS ...]   (BLOCKS 0: the default)
NETS: names from configs/nets.yaml or layer lists, comma-separated (1,8,60-8-8-7); PARAMS: sets
like THREADS=256:BARRIER=1 (default: the registry's defaults).
e.g. python3 lab/scripts/fused_grid.py fused-barrier 1,8 1040 8,33,132 THREADS=256:BARRIER=0 THREADS=256:BARRIER=1
     python3 lab/scripts/fused_grid.py fused 8 1040 132 IN_FLIGHT=2 IN_FLIGHT=4 IN_FLIGHT=8

Why a script, not the CLI: varies the persistent grid (--blocks) and compile switches across nets in
one process, interleaved, to compare builds on one machine.
"""

import sys

from nnbench import glyphs, nets
from nnbench.errors import KernelFault, NnbenchError
from nnbench.runtime.compile import compile_sources
from nnbench.runtime.cuda import CudaBackend
from nnbench.workloads.train import fused
from nnbench.workloads.train import mlp

be = CudaBackend(0)
v = next(x for x in mlp.versions() if x.name == sys.argv[1])
iters = int(sys.argv[3])
grids = [int(g) or None for g in sys.argv[4].split(",")]  # 0: the default grid
psets = [v.parse_params(a) for a in sys.argv[5:]]
psets = psets or [v.defaults()]
comp = compile_sources(be.arch, [(v.source, p) for p in psets])
print("net params blocks barriers/it smem_KiB check_err us/iter us/feedforward epoch_error")
for name in sys.argv[2].split(","):
    if "-" in name:
        layers, s = tuple(int(x) for x in name.split("-")), {}
    else:
        layers, s = nets.get(name).layers, dict(nets.get(name).settings)
    hyper = mlp.Hyper.from_settings(s, tolerance=1e-30, max_iterations=iters)
    init = mlp.init_params(layers, 0, hyper.init_scale, hyper.init)
    train = glyphs.clean(layers[0])
    for p, c in zip(psets, comp):
        label = ":".join(f"{k}={x}" for k, x in p.items())
        for g in grids:
            try:
                err = mlp.check_version(be, v, p, c, layers, init, train, hyper, g)
                fn = mlp.fused_net(be, v, p, c, layers, init, train, hyper, g)
                fn.train(len(train), -1.0)  # warm-up
                secs, errs = 0.0, []
                for _ in range(-(-iters // (len(train) * fused.EPOCHS_PER_LAUNCH))):
                    sec, e = fn.train(len(train) * fused.EPOCHS_PER_LAUNCH, -1.0)
                    secs += sec
                    errs += e
                n = len(errs) * len(train)
                ff = min(fn.feedforward(train)[1] for _ in range(3)) / len(train)
                print(name, label, fn.blocks, fused.barriers_per_iteration(layers, fn.exchange), f"{fn.dyn / 1024:.0f}",
                      f"{err:.1e}", f"{secs / n * 1e6:.2f}", f"{ff * 1e3:.2f}", f"{errs[-1]:.2e}", flush=True)
            except NnbenchError as e:
                print(name, label, g, "refused:", e, flush=True)
            except KernelFault as e:
                print(name, label, g, "FAULT:", e, flush=True)
