"""Where a persistent trainer's iteration goes, phase by phase: the kernel built with PHASE_TIMES
times, in block 0, each phase's wait (until the values it needs are there) and its work (until
the next wait), over one launch of ITERATIONS iterations after a warm-up; with the device's
measured SM-to-SM handoff and grid-barrier latencies (nnbench devices --measure) beside them.
    python3 lab/scripts/fused_phases.py VERSION NET ITERATIONS [PARAMS ...]
e.g. python3 lab/scripts/fused_phases.py fused 8 1040 IN_FLIGHT=2 IN_FLIGHT=4:PAIRS=0
     python3 lab/scripts/fused_phases.py fused-barrier 8 1040

Why a script, not the CLI: builds the kernel with PHASE_TIMES and reads its per-phase clocks, which
no record carries.
"""

import sys

from nnbench import glyphs, nets
from nnbench.runtime.compile import compile_sources
from nnbench.runtime.cuda import CudaBackend
from nnbench.workloads.train import fused
from nnbench.workloads.train import mlp
from nnbench.profiling.ceilings import measure_ceilings

be = CudaBackend(0)
v = next(x for x in mlp.versions() if x.name == sys.argv[1])
net = nets.get(sys.argv[2]) if "-" not in sys.argv[2] else None
layers = net.layers if net else tuple(int(x) for x in sys.argv[2].split("-"))
iters = int(sys.argv[3])
psets = [v.parse_params(a) for a in sys.argv[4:]]
psets = psets or [v.defaults()]
c = measure_ceilings(be)
print(f"{be.device.name}: SM->SM handoff {c['handoff_us']:.3f} us one way, grid barrier ({be.device.sm_count} "
      f"blocks) {c['grid_barrier_us']:.3f} us")
hyper = mlp.Hyper.from_settings(dict(net.settings) if net else {}, tolerance=1e-30, max_iterations=iters)
init = mlp.init_params(layers, 0, hyper.init_scale, hyper.init)
train = glyphs.clean(layers[0])
comp = compile_sources(be.arch, [(v.source, dict(p, PHASE_TIMES=1)) for p in psets])
L = len(layers) - 1
for p, cc in zip(psets, comp):
    fn = mlp.fused_net(be, v, p, cc, layers, init, train, hyper, None)
    polled = fused.phases_per_iteration(layers, fn.out_local) - (L - 1)  # backward steps that poll: 0 up
    names = [f"fwd {l}" for l in range(1, L)] + [f"bwd {l}" for l in range(polled - 1, -1, -1)]
    fn.train(len(train), -1.0)  # warm-up
    sec, _ = fn.train(iters, -1.0)
    wait, work, mhz = fn.phase_times(iters)
    label = ":".join(f"{k}={x}" for k, x in p.items())
    print(f"\n{sys.argv[1]} {label} blocks={fn.blocks}: {sec / iters * 1e6:.2f} us/iteration (CUDA events), "
          f"phases {wait.sum() + work.sum():.2f} us = wait {wait.sum():.2f} + work {work.sum():.2f} (SM clock "
          f"{mhz:.0f} MHz)")
    print("phase    input  wait_us  work_us")
    for k, name in enumerate(names):
        n_in = layers[int(name.split()[1])] if name.startswith("fwd") else layers[int(name.split()[1]) + 1]
        print(f"{name:7s} {n_in:6d} {wait[k]:8.3f} {work[k]:8.3f}")
