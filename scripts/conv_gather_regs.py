"""Conv steps 9 and 10 with the gather's registers (GATHER_REGS, a -D of kernels_cu/conv/implicit_wgmma.cuh)
at 40 and 88, on the resnet layers: the forward and the backward's two gradients timed apart.

Not the CLI: GATHER_REGS is a build switch of the experiment behind the kernels' default, not a
registry parameter, and the backward's two gradients are timed alone (the suite times the pass)."""

from nnbench import measure, registry
from nnbench.runtime.compile import compile_sources
from nnbench.runtime.cuda import CudaBackend
from nnbench.suites import conv


def main() -> None:
    be = CudaBackend()
    st = measure.TimingSettings(budget_s=0.1)
    fwd, bwd = registry.get("conv", "implicit-wgmma"), registry.get("conv-backward", "implicit-wgmma-backward")
    fcombos = [dict(BN=bn, GATHER_REGS=g) for bn in (64, 128) for g in (40, 88)]
    bcombos = [dict(BM=bm, BN=bn, GATHER_REGS=g) for bm, bn in ((128, 128), (64, 128)) for g in (40, 88)]
    comps = compile_sources(fwd.target(be.arch), [(fwd.source, dict(fwd.defaults(), **c)) for c in fcombos]
                            + [(bwd.source, dict(bwd.defaults(), **c)) for c in bcombos])
    for shape in conv.load_sets()["resnet"]:
        sess = conv.WORKLOAD.session(be, st, 1e-4, 0, {})
        sess.prepare(shape)
        b = sess._gradients()
        for i, c in enumerate(fcombos):
            params = dict(fwd.defaults(), BN=c["BN"])
            run, _ = conv.implicit_forward(be, fwd, params, comps[i], shape, sess.layer.X, sess.layer.Wt, sess.layer.Y)
            be.fill_nan(sess.layer.Y, sess.layer.count)
            run()
            err = sess.layer.rel_err()
            print(f"{shape.label:30s} fwd {c} {measure.measure(be, run, st).median_ms:.4f} err {err:.1e}", flush=True)
        for i, c in enumerate(bcombos):
            params = dict(bwd.defaults(), BM=c["BM"], BN=c["BN"])
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
