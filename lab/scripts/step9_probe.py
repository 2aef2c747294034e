"""Probe ladder step 9's kernels on the lent GPU: build each configuration (a source under kernels_cu/
and -D macros, which may go beyond the registry's choices: ablations, experiments), verify it against
float64 where asked, and time it with CUDA events; or, with --launch-only, just launch one
configuration a few times for ncu.

    python3 lab/scripts/step9_probe.py 'base:gemm/09_tf32x3_wgmma.cu:' 'stages3:gemm/09_tf32x3_wgmma.cu:STAGES=3'

A configuration is NAME[!]:SOURCE:K=V,...; a trailing ! on the name skips verification (an
ablation computes the wrong function on purpose).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

import numpy as np

from nnbench import registry
from nnbench.errors import CompileError
from nnbench.runtime import open_backend
from nnbench.runtime.compile import CompileRequest, compile_many
from nnbench.workloads.gemm import session as gemm


def parse(spec: str):
    name, source, defs = spec.split(":", 2)
    params = {k: int(v) for k, v in (d.split("=") for d in defs.split(",") if d)}
    return name.rstrip("!"), not name.endswith("!"), source, params


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("configs", nargs="+")
    ap.add_argument("--size", default="4096,4096,4096", help="M,N,K (or one number for a cube)")
    ap.add_argument("--variant", default="tf32x3_wgmma", help="registry row giving launch geometry and maps")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--launch-only", action="store_true")
    a = ap.parse_args()
    dims = [int(x) for x in a.size.split(",")]
    M, N, K = dims * 3 if len(dims) == 1 else dims
    be, _ = open_backend("cuda")
    base = registry.get("gemm", a.variant)
    cfgs = [parse(s) for s in a.configs]
    from nnbench import paths
    reqs = []
    for _, _, src, params in cfgs:
        full = dict(base.defaults(), **params)
        reqs.append(CompileRequest.make(paths.KERNELS / src, full, base.target(be.arch)))
    compiled = compile_many(reqs, return_errors=True)
    rng = np.random.default_rng(2027)
    A = np.asfortranarray(gemm.random_nonzero(rng, (M, K)))
    B = np.asfortranarray(gemm.random_nonzero(rng, (K, N)))
    ref = None
    da, db, dc = be.upload(A), be.upload(B), be.upload(np.zeros((M, N), np.float32, order="F"))
    shape = gemm.Shape(M, N, K)
    for (name, check, src, params), comp in zip(cfgs, compiled):
        if isinstance(comp, CompileError):
            print(f"{name}: compile failed: {str(comp)[-2000:]}", flush=True)
            continue
        full = dict(base.defaults(), **params)
        v = replace(base, source=src)
        kernel = be.load(comp, v.kernel)
        info = comp.ptxas.get(v.kernel)
        launch_for, path = gemm.gemm_launch(be, kernel, v, full, shape, be.ptr(da), be.ptr(db), be.ptr(dc))
        fn = launch_for(1.0, 0.0)
        if a.launch_only:
            for _ in range(4):
                fn()
            be.synchronize()
            continue
        err = float("nan")
        if check:
            be.fill_nan(dc, M * N)
            fn()
            be.synchronize()
            out = be.download(dc, np.zeros(M * N, np.float32)).reshape((M, N), order="F").astype(np.float64)
            if ref is None:
                ref = A.astype(np.float64) @ B.astype(np.float64)
            err = float(np.linalg.norm(out - ref) / np.linalg.norm(ref))
        be.timed(fn, 3)
        ms = sorted(be.timed(fn, a.reps) for _ in range(5))[2]
        tf = 2.0 * M * N * K / ms / 1e9
        regs = info.registers if info else -1
        print(f"{name:<22} {M}x{N}x{K} {ms:8.4f} ms {tf:7.2f} TF/s err {err:.2e} regs {regs} {path} "
              f"{' '.join(f'{k}={v}' for k, v in params.items())}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
