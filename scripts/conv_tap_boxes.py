"""Conv steps 9 and 10 with the input's A tile gathered (ALOAD=0) or by tap boxes (ALOAD=1) on the stride-1
resnet layers: the forward at each split of K (1 or 2 slices, and the suite's rule), and the backward's
two gradients timed apart. Each run is checked against float64 first.

Not the CLI: the split count is the suite's rule there, and the backward's gradients are timed as one pass."""

from nnbench import measure, registry
from nnbench.runtime.compile import compile_sources
from nnbench.runtime.cuda import CudaBackend
from nnbench.suites import conv


def main() -> None:
    be = CudaBackend()
    st = measure.TimingSettings(budget_s=0.1)
    fwd, bwd = registry.get("conv", "implicit-wgmma"), registry.get("conv-backward", "implicit-wgmma-backward")
    combos = [dict(BN=bn, ALOAD=a) for bn in (64, 128) for a in (0, 1)]
    comps = compile_sources(fwd.target(be.arch), [(fwd.source, dict(fwd.defaults(), **c)) for c in combos]
                            + [(bwd.source, dict(bwd.defaults(), **c)) for c in combos])
    for shape in conv.load_sets()["resnet"][:2]:
        sess = conv.WORKLOAD.session(be, st, 1e-4, 0, {})
        sess.prepare(shape)
        b = sess._gradients()
        for i, c in enumerate(combos):
            params = dict(fwd.defaults(), **c)
            for slices in (None, 1, 2):
                run, path = conv.implicit_forward(be, fwd, params, comps[i], shape, sess.layer.X, sess.layer.Wt,
                                                  sess.layer.Y, slices=slices)
                be.fill_nan(sess.layer.Y, sess.layer.count)
                run()
                err = sess.layer.rel_err()
                ms = measure.measure(be, run, st).median_ms
                print(f"{shape.label:30s} fwd {c} slices {slices or 'rule'} {ms:.4f} ms err {err:.1e} {path}",
                      flush=True)
        for i, c in enumerate(combos):
            params = dict(bwd.defaults(), **c)
            run, path = conv.implicit_backward(be, bwd, params, comps[len(combos) + i], shape, sess.layer.X,
                                               sess.layer.Wt, b["dY"], b["dX"], b["dW"])
            be.fill_nan(b["dX"], sess.layer.x.size)
            be.fill_nan(b["dW"], sess.layer.wt.size)
            run()
            err = sess._grad_err()
            t = {k: round(measure.measure(be, f, st).median_ms, 4) for k, f in run.parts.items()}
            whole = measure.measure(be, run, st).median_ms
            print(f"{shape.label:30s} bwd {c} {t} pass {whole:.4f} ms err {err:.1e} {path}", flush=True)


if __name__ == "__main__":
    main()
