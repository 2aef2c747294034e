"""Try optimizer settings for nets with the kcm-mass version: which (init, scale, rate, momentum)
trains them? Prints the error curve per setting. Used for docs/RESULTS.md (convergence).
    python3 lab/scripts/train_settings.py NETS ITERATIONS [SCALE,RATE,MOMENTUM[,INIT] ...]
NETS is one net or a comma-separated list (7,8); INIT is glorot (the default) or centered.

Why a script, not the CLI: searches optimizer settings (init, scale, rate, momentum) for
convergence, not speed.
"""

import sys
import time

from nnbench import glyphs, nets
from nnbench.runtime.cuda import CudaBackend
from nnbench.workloads.train import mlp

be = CudaBackend(0)
v = next(x for x in mlp.versions() if x.name == "kcm-mass")
iters = int(sys.argv[2])
comp = mlp.compile_versions(be.arch, [(v, v.defaults())])["kcm-mass"]
settings = [a.split(",") for a in sys.argv[3:]] or [
    s.split(",") for s in ("4,0.3,0.8", "1,0.3,0.8", "1,0.1,0.9", "2,0.1,0.9", "1,0.5,0.5", "0.5,0.3,0.8",
                           "1,0.05,0.9", "2,0.3,0.5")]
for net in sys.argv[1].split(","):
    layers = nets.get(net).layers
    train = glyphs.clean(layers[0])
    test = glyphs.noisy(layers[0], 2, 1)
    for fields in settings:
        scale, rate, mom = (float(x) for x in fields[:3])
        kind = fields[3] if len(fields) > 3 else "glorot"
        init = mlp.init_params(layers, 0, scale, kind)
        t0 = time.time()
        out = mlp.train_gpu(be, v, v.defaults(), comp, layers, init, train, test,
                            mlp.Hyper(rate, mom, 1e-5, iters))
        curve = [f"{e:.1e}" for _, e in out.error_curve[:: max(1, len(out.error_curve) // 6)]]
        print(net, kind, scale, rate, mom, out.iterations, out.converged, f"{out.final_error:.2e}",
              f"train {out.train_accuracy:.2f}", f"test {out.test_accuracy:.2f}", curve, f"{time.time() - t0:.0f}s",
              flush=True)
