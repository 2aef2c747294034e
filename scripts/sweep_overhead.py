"""Where a sweep's run time goes outside the kernels (issue 30's targets: <= 5% on GEMM step 4's
213-case space at 4096^3, and `--gpus 1` within 2% of a plain sweep).

Not the CLI because it runs the sweep twice and splits the time: each run is exactly
`nnbench sweep configs/step4_space.yaml --out FILE [--gpus 1]` (sweep.execute through nnbench.api).

    python3 scripts/sweep_overhead.py [--config configs/step4_space.yaml] --out-dir DIR

Per run: the run phase (first job to last record), the kernels' event-timed time (warm-up, rate
estimate, both verification launches, every sample), the workers' own time per job, and the wait
for the first record (worker start-up and the first problem not hidden behind compilation).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nnbench import api, config, results  # noqa: E402


def figures(o) -> dict:
    return {"cases": o.jobs, "skipped": o.skipped, "wall_s": o.wall_s, "run_s": o.run_s, "kernel_s": o.gpu_s,
            "worker_s": o.worker_s, "first_record_s": o.first_record_s, "compile_wall_s": o.compile.wall_s,
            "compiled": o.compile.compiled, "cached": o.compile.cached,
            "overhead_run": o.overhead, "overhead_whole": o.overhead_total,
            "outside_kernels_in_workers_s": o.worker_s - o.gpu_s, "parent_and_pipe_s": o.run_s - o.worker_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/step4_space.yaml")
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--runs", nargs="+", default=["plain", "gpus1"])
    ap.add_argument("--backend", default="cuda")
    args = ap.parse_args()
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    got = {}
    for name in args.runs:
        specs = config.load_config(Path(args.config))
        o = api.run_sweep(specs, backend=args.backend, out=out / f"{name}.csv",
                          gpus=[0] if name == "gpus1" else None).outcomes[0]
        got[name] = figures(o)
        f = got[name]
        print(f"{name}: {f['cases']} cases, run {f['run_s']:.2f} s (whole {f['wall_s']:.2f} s, compile "
              f"{f['compile_wall_s']:.1f} s: {f['compiled']} compiled, {f['cached']} cached), "
              f"kernels {f['kernel_s']:.2f} s, "
              f"overhead {100 * f['overhead_run']:.2f}% of the run ({100 * f['overhead_whole']:.2f}% of the whole); "
              f"in workers outside kernels {f['outside_kernels_in_workers_s']:.2f} s, parent and pipe "
              f"{f['parent_and_pipe_s']:.2f} s, first record after {f['first_record_s']:.2f} s", flush=True)
    if "plain" in got and "gpus1" in got:
        got["gpus1_over_plain_run"] = got["gpus1"]["run_s"] / got["plain"]["run_s"] - 1
        print(f"--gpus 1 over plain: {100 * got['gpus1_over_plain_run']:+.2f}% of the run phase")
    got["git_sha"] = results.git_sha()
    (out / "overhead.json").write_text(json.dumps(got, indent=1) + "\n")


if __name__ == "__main__":
    main()
