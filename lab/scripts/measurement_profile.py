"""Where a run of configs/ci.yaml spends its time, on a GPU: each part run in this process through
`harness.run` (the path of `nnbench gemm|train|conv`: a fresh session per run, so every input and float64
reference is made again, as a fresh process makes them), timed record by record against the kernel time
inside it, and profiled with cProfile.

Not the CLI because: the CLI runs each part in a worker process, where cProfile does not reach; the records
and their order are the same (nnbench/harness.py is what the worker runs).

  python3 lab/scripts/measurement_profile.py OUT_DIR [--rounds 2]

Writes OUT_DIR/profile.json (per part and round: wall, kernel time, per-record wall) and
OUT_DIR/profile_<part>.txt (cProfile's top functions of the last round, cumulative and own time).
"""

from __future__ import annotations

import cProfile
import io
import json
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from nnbench import config, harness, results  # noqa: E402
from nnbench.runtime.cuda import CudaBackend  # noqa: E402


def main() -> None:
    out = Path(sys.argv[1])
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 2
    out.mkdir(parents=True, exist_ok=True)
    be = CudaBackend(0)
    env = results.environment(be)
    specs = config.load_config(Path(__file__).resolve().parents[2] / "configs" / "ci.yaml")
    report: dict = {}
    for r in range(rounds):
        for spec in specs:
            prof = cProfile.Profile()
            rows, t0 = [], time.perf_counter()
            last = t0
            prof.enable()
            for rec in harness.run(spec.workload, be, spec.cases, spec.shapes, spec.settings, spec.rtol, spec.seed,
                                   dict(env), spec.vendor, spec.baseline):
                now = time.perf_counter()
                kernel = (rec.get("median_ms") or 0) * (rec.get("samples") or 0) / 1e3
                rows.append({"case": f"{rec.get('variant')} {rec.get('shape')}", "status": rec.get("status"),
                             "wall_s": round(now - last, 3), "kernel_s": round(kernel, 3)})
                last = now
            prof.disable()
            wall = time.perf_counter() - t0
            report[f"{spec.workload_name} round {r}"] = {"wall_s": wall, "kernel_s": sum(x["kernel_s"] for x in rows),
                                                 "records": rows}
            print(f"{spec.workload_name} round {r}: {wall:.2f} s, kernel {report[f'{spec.workload_name} round {r}']['kernel_s']:.2f} s",
                  flush=True)
            if r == rounds - 1:
                text = io.StringIO()
                st = pstats.Stats(prof, stream=text)
                st.sort_stats("cumulative").print_stats(45)
                st.sort_stats("tottime").print_stats(30)
                (out / f"profile_{spec.workload_name}.txt").write_text(text.getvalue())
    (out / "profile.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
