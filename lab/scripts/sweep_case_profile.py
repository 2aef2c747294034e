"""Where a case's host time goes outside its kernels (issue 30's overhead): one process, GEMM step 4's
first N cases at 4096^3, each run as a sweep's worker runs it (GemmSession.run_case), three passes:
as is, with NVML telemetry off (backend.telemetry -> None), as is again; then one pass under cProfile.
Per pass: the median of wall_ms - gpu_ms over the cases, and the verification's share.

    python3 lab/scripts/sweep_case_profile.py [--cases 24] [--out FILE]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from nnbench import config  # noqa: E402
from nnbench.runtime.cuda import CudaBackend  # noqa: E402
from nnbench.workloads import gemm  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=24)
    ap.add_argument("--out")
    args = ap.parse_args()
    spec = config.load_sweep(Path("configs/step4_space.yaml"))
    cases = spec.cases[:args.cases]
    shape = spec.shapes[0]
    backend = CudaBackend(0)
    compiled = spec.workload.compile(backend.arch, cases, jobs=16)
    session = gemm.GemmSession(backend, spec.settings, spec.rtol, 1, {})
    session.prepare(shape)
    backend.prime()
    verify_ms: list[float] = []
    real_verify = gemm._verify

    def timed_verify(bufs, launch_for):
        t0 = time.perf_counter()
        out = real_verify(bufs, launch_for)
        verify_ms.append(1e3 * (time.perf_counter() - t0) - out[1])
        return out

    gemm._verify = timed_verify
    lines = []
    real_tel = backend.telemetry
    for name in ("as is", "no telemetry", "as is again"):
        backend.telemetry = (lambda: None) if name == "no telemetry" else real_tel
        verify_ms.clear()
        outs = []
        for case in cases:
            rec = session.run_case(case, shape, compiled[case])
            outs.append(rec["wall_ms"] - rec["gpu_ms"])
        lines.append(f"{name}: outside kernels per case median {statistics.median(outs):.3f} ms (min {min(outs):.3f}); "
                     f"of it verification's host part median {statistics.median(verify_ms):.3f} ms")
        print(lines[-1], flush=True)
    backend.telemetry = real_tel
    prof = cProfile.Profile()
    prof.enable()
    for case in cases:
        session.run_case(case, shape, compiled[case])
    prof.disable()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(30)
    lines.append(s.getvalue())
    print(s.getvalue())
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
