"""Conv steps 9 and 10 over build parameters (by default one or two producer warpgroups, PRODUCER_WGS) on the
resnet layers: the forward and the backward's two gradients timed apart, each row verified against float64.
(The first run, lab/data/conv/implicit/producers_b3acb5e.log, also crossed GATHER_MASK, a build switch of
the gather's bounds test since made the code.)

Not the CLI: the backward's two gradients are timed alone (the suite times the pass), and any -D a
kernel reads may be passed (--fwd/--bwd K=V,...). Usage:
python3 lab/scripts/conv_producers.py [--budget S] [--layer 2]"""

import argparse

from nnbench import measure, registry
from nnbench.runtime.compile import compile_sources
from nnbench.runtime.cuda import CudaBackend
from nnbench.workloads.conv import session as conv

BUILDS = [dict(PRODUCER_WGS=p) for p in (1, 2)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=0.1)
    ap.add_argument("--layer", type=int, action="append", help="1-based resnet layer (default all)")
    ap.add_argument("--fwd", action="append", help="a forward build as K=V,K=V (repeatable; default the grid)")
    ap.add_argument("--bwd", action="append", help="a backward build as K=V,K=V (repeatable; default the grid)")
    a = ap.parse_args()
    be = CudaBackend()
    st = measure.TimingSettings(budget_s=a.budget)
    fcombos = [dict(BN=bn, **b) for bn in (64, 128) for b in BUILDS]
    bcombos = [dict(BM=bm, BN=bn, **b) for bm, bn in ((128, 128), (128, 64)) for b in BUILDS]
    bcombos.append(dict(BM=64, BN=128, PRODUCER_WGS=2))
    spec = lambda text: {k: int(v) for k, v in (kv.split("=") for kv in text.split(","))}  # noqa: E731
    if a.fwd or a.bwd:
        fcombos, bcombos = [spec(t) for t in a.fwd or []], [spec(t) for t in a.bwd or []]
    time_builds(be, st, fcombos, bcombos, a.layer)


def time_builds(be, st, fcombos: list[dict], bcombos: list[dict], layers: list[int] | None = None) -> None:
    """Each forward and backward build (the registry's defaults with a combo's -Ds) on the resnet layers
    (1-based, default all): verified against float64 and timed, the backward's two gradients apart.
    Also serves lab/scripts/conv_gather_regs.py."""
    fwd, bwd = registry.get("conv", "implicit-wgmma"), registry.get("conv-backward", "implicit-wgmma-backward")
    comps = compile_sources(fwd.target(be.arch), [(fwd.source, dict(fwd.defaults(), **c)) for c in fcombos]
                            + [(bwd.source, dict(bwd.defaults(), **c)) for c in bcombos])
    sets = conv.load_sets()["resnet"]
    for li in layers or range(1, len(sets) + 1):
        shape = sets[li - 1]
        sess = conv.WORKLOAD.session(be, st, 1e-4, 0, {})
        sess.prepare(shape)
        b = sess._gradients()
        for i, c in enumerate(fcombos):
            params = {k: v for k, v in dict(fwd.defaults(), **c).items() if k in fwd.defaults()}
            run, path = conv.implicit_forward(be, fwd, params, comps[i], shape, sess.layer.X, sess.layer.Wt,
                                              sess.layer.Y, pair=not c.get("UNPAIRED"))
            be.fill_nan(sess.layer.Y, sess.layer.count)
            run()
            err = sess.layer.rel_err()
            s = measure.measure(be, run, st)
            parts = {k: round(measure.measure(be, f, st).median_ms, 4) for k, f in getattr(run, "parts", {}).items()}
            print(f"{shape.label:30s} fwd {c} {s.median_ms:.4f} iqr {s.iqr_ms:.4f} err {err:.1e} {path} {parts}",
                  flush=True)
        for i, c in enumerate(bcombos):
            params = {k: v for k, v in dict(bwd.defaults(), **c).items() if k in bwd.defaults()}
            run, path = conv.implicit_backward(be, bwd, params, comps[len(fcombos) + i], shape, sess.layer.X,
                                               sess.layer.Wt, b["dY"], b["dX"], b["dW"])
            be.fill_nan(b["dX"], sess.layer.x.size)
            be.fill_nan(b["dW"], sess.layer.wt.size)
            run()
            err = sess._grad_err()
            t = {k: round(measure.measure(be, f, st).median_ms, 4) for k, f in run.parts.items()}
            print(f"{shape.label:30s} bwd {c} {t} sum {sum(t.values()):.4f} err {err:.1e} {path}", flush=True)


if __name__ == "__main__":
    main()
