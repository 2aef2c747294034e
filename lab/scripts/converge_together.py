"""Convergence runs of several per-sample GPU versions on several nets at once, side by side on
one GPU: each (net, version) trains on its own CUDA stream, an iteration of each in turn, epoch
by epoch, until its epoch's mean error is within the tolerance or --max-iterations. The seed's
versions leave most of the GPU idle (a few blocks a launch), so a dozen of them run in about the
time of the slowest alone. Each is checked against the float64 reference first, as in `nnbench
train`; the rows are `nnbench train`'s, with the per-iteration times left out (the versions share
the GPU, so those are not their own).
    python3 lab/scripts/converge_together.py NETS VERSIONS CSV [--max-iterations N]
                                         [--time-limit S] [--checkpoints DIR]
NETS and VERSIONS comma-separated (5,6 simple,kcm,mass,kcm-mass); a version may carry a parameter
set, kcm@THREADS=1 (kcm in simple's one-thread blocks, spread over more SMs: the same trajectory bit
for bit, tests/test_gpu_mlp.py). With --time-limit the run
stops at the first epoch end after S seconds; with --checkpoints each unfinished (net, version)
leaves its weights, velocities and curve there at the end of an epoch, and a later run with the
same directory goes on from them, bit for bit as if it had not stopped.

Why a script, not the CLI: runs several versions to convergence side by side in one process with
checkpoints; a sweep times a fixed number of iterations.
"""

import argparse
import math
import time
from pathlib import Path

import numpy as np
import pycuda.driver as drv

from nnbench import nets, results
from nnbench.results import CsvSink
from nnbench.runtime.compile import compile_sources
from nnbench.runtime.cuda import CudaBackend
from nnbench.workloads.train import mlp


class Run:
    """One (net, version) on its own stream."""

    def __init__(self, be, net, variant, params, compiled, max_iterations, checkpoints):
        self.net, self.v = net, variant
        self.layers = net.layers
        self.hyper = mlp.Hyper.from_settings(dict(net.settings), max_iterations=max_iterations)
        self.init, self.train, self.test = mlp.data_sets(self.layers, self.hyper)  # nnbench train's
        self.check = mlp.check_version(be, variant, params, compiled, self.layers, self.init, self.train, self.hyper)
        self.rtol = mlp.check_tolerance(self.init, self.train, self.hyper)
        self.gpu = mlp.GpuNet(be, variant, params, self.layers, self.init, self.train, self.hyper, compiled)
        self.stream = drv.Stream()
        self.epoch = [self.gpu.callable(self.gpu.step_launches(s), self.stream) for s in range(len(self.train))]
        self.err = drv.pagelocked_empty(1, np.float32)
        self.out = mlp.Outcome(variant.name)
        self.params = params
        changed = "".join(f"@{k}={x}" for k, x in params.items() if x != variant.defaults()[k])  # kcm@THREADS=1
        self.saved = Path(checkpoints) / f"net{net.name}_{variant.name}{changed}.npz" if checkpoints else None
        if self.saved and self.saved.exists():
            self.resume()

    @property
    def done(self) -> bool:
        return self.out.converged or self.out.iterations >= self.hyper.max_iterations

    def launch(self, s: int) -> None:  # sample s of the current epoch, if the epoch has it
        if s < self.batch:
            self.epoch[s]()

    def begin_epoch(self) -> None:
        self.batch = min(len(self.train), self.hyper.max_iterations - self.out.iterations)
        drv.memset_d32_async(self.gpu.d_err, 0, 1, self.stream)

    def end_epoch(self) -> None:
        drv.memcpy_dtoh_async(self.err, self.gpu.d_err, self.stream)

    def settle(self) -> None:  # after the stream's epoch
        self.stream.synchronize()
        mlp.record_epoch(self.out, self.hyper, len(self.train), self.batch, float(self.err[0]) / self.batch)

    def finish(self) -> dict:
        mlp.score(self.out, self.gpu.feedforward, self.train, self.test)
        rec = dict(mlp.base_record(self.layers, self.hyper, self.test), net=f"Net {self.net.name}",
                   version=self.v.name, step=self.v.step, params=" ".join(f"{k}={x}" for k, x in self.params.items()),
                   weights_rel_err=self.check, weights_rtol=self.rtol,
                   status="PASS" if self.check <= self.rtol else "FAIL",
                   error="trained side by side with others (lab/scripts/converge_together.py): no time per iteration")
        rec = mlp.train_record(rec, self.out, None, None, None)
        rec["us_per_iteration"] = rec["us_per_feedforward"] = None
        if self.saved and self.saved.exists():
            self.saved.unlink()
        return rec

    def save(self) -> None:
        n = int(self.gpu.w_off[-1])
        np.savez(self.saved, w=self.gpu.be.download(self.gpu.d_w, np.zeros(n, np.float32)),
                 v=self.gpu.be.download(self.gpu.d_v, np.zeros(n, np.float32)),
                 curve=np.array(self.out.error_curve, dtype=np.float64).reshape(-1, 2))

    def resume(self) -> None:
        z = np.load(self.saved)
        self.gpu.be.write(self.gpu.d_w, z["w"])
        self.gpu.be.write(self.gpu.d_v, z["v"])
        self.out.error_curve = [(int(i), float(e)) for i, e in z["curve"]]
        if self.out.error_curve:
            self.out.iterations, self.out.final_error = self.out.error_curve[-1][0], self.out.error_curve[-1][1]
        print(f"Net {self.net.name} {self.v.name}: resumed at {self.out.iterations:,} iterations", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("nets")
    ap.add_argument("versions")
    ap.add_argument("csv")
    ap.add_argument("--max-iterations", type=int, default=800_000)
    ap.add_argument("--time-limit", type=float, default=math.inf)
    ap.add_argument("--checkpoints")
    a = ap.parse_args()
    be = CudaBackend(0)
    specs = [x.partition("@") for x in a.versions.split(",")]
    plain = mlp.plan([n for n, _, _ in specs], "cuda")
    chosen = [(v, v.parse_params(spec)) for (v, _), (_, _, spec) in zip(plain, specs)]
    # one build per (version, parameters): kcm and kcm@THREADS=1 may run side by side
    compiled = compile_sources(be.arch, [(v.source, p) for v, p in chosen])
    if a.checkpoints:
        Path(a.checkpoints).mkdir(parents=True, exist_ok=True)
    runs = [Run(be, nets.get(n), v, p, c, a.max_iterations, a.checkpoints)
            for n in a.nets.split(",") for (v, p), c in zip(chosen, compiled)]
    sink = CsvSink(Path(a.csv), append=Path(a.csv).exists(), fields=results.FIELDS)
    env = results.environment(be)
    start, last = time.perf_counter(), 0.0
    active = [r for r in runs if not r.done]
    while active:
        for r in active:
            r.begin_epoch()
        for s in range(len(active[0].train)):  # every net here has the 52 letters
            for r in active:
                r.launch(s)
        for r in active:
            r.end_epoch()
        for r in active:
            r.settle()
        for r in [r for r in active if r.done]:
            sink.append(dict(r.finish(), **env))
            print(f"Net {r.net.name} {r.v.name}: {r.out.iterations:,} iterations, converged {r.out.converged}, "
                  f"error {r.out.final_error:.2e}, test {r.out.test_accuracy:.1%}", flush=True)
        active = [r for r in active if not r.done]
        now = time.perf_counter() - start
        if now - last > 60:
            last = now
            print(f"{now:6.0f} s: " + ", ".join(f"{r.net.name}/{r.v.name} {r.out.iterations:,} {r.out.final_error:.1e}"
                                                 for r in active), flush=True)
        if now > a.time_limit:
            break
    for r in active:
        if r.saved:
            r.save()
            print(f"Net {r.net.name} {r.v.name}: saved at {r.out.iterations:,} iterations", flush=True)
    sink.close()


if __name__ == "__main__":
    main()
