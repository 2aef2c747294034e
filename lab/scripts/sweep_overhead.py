"""Where a sweep's run time goes outside the kernels (issue 30's targets: <= 5% on GEMM step 4's
213-case space at 4096^3, and `--gpus 1` within 2% of a plain sweep).

Not the CLI because it runs the sweep several times and splits the time: each run is exactly
`nnbench sweep configs/step4_space.yaml --out FILE [--gpus 1]` (sweep.execute through nnbench.api).

    python3 lab/scripts/sweep_overhead.py [--config configs/step4_space.yaml] \
       --out-dir DIR [--pairs 3] [--lead plain]
        [--compile-first sm_90] [--max-seconds S]

First a plain sweep from an empty cubin cache (a fresh NNBENCH_CACHE: the overhead figure, as a
user's first sweep of a space), then `--pairs` pairs of a plain sweep and a `--gpus 1` sweep on the
now warm cache, in the order g p, p g, g p, ... (each pair's two runs are next to each other, and
which goes first alternates, so a drift of the machine does not favour either). `--lead plain`
mirrors it (p g, g p, p g, ...): every kind then takes the places in the series that the other took,
which tells an effect of the kind from one of the place (after the cold run, say). `--compile-first ARCH`
replaces the measured cold run by a compile of the config's kernels into the empty cache (no overhead
figure, ~30 s less of a device call: every measured run is then one of a pair); `--max-seconds` starts
no pair that would end after that many seconds of the script (as the longest run so far predicts).
Per-pair figures beyond the run phase's ratio: lab/scripts/sweep_pairs.py.

Per run: the samples the stopping rule drew (and how many cases needed more than their first batch),
the run phase (first job to last record), the kernels' event-timed time (warm-up, rate
estimate, both verification launches, every sample), the workers' own time per job, the wait
for the first record, and the first worker's start-up phases (nnbench/sweeps/worker.py: backend open,
vendor library, helper kernels, first problem built and uploaded; seconds after its spawn).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from nnbench import api, config, results, sweep  # noqa: E402


def drawn(path: Path) -> tuple[int, int]:
    """(samples over every row, rows that drew more than the fewest any row drew): the stopping rule's effort."""
    with open(path, newline="", encoding="utf-8") as f:
        counts = [int(r["samples"]) for r in csv.DictReader(f) if r.get("samples")]
    return sum(counts), sum(c > min(counts) for c in counts) if counts else 0


def figures(o) -> dict:
    samples, beyond = drawn(o.path)
    return {"samples": samples, "cases_beyond_first_batch": beyond,
            "cases": o.jobs, "skipped": o.skipped, "wall_s": o.wall_s, "run_s": o.run_s, "kernel_s": o.gpu_s,
            "worker_s": o.worker_s, "first_record_s": o.first_record_s, "compile_wall_s": o.compile.wall_s,
            "compiled": o.compile.compiled, "cached": o.compile.cached,
            "overhead_run": o.overhead, "overhead_whole": o.overhead_total,
            "outside_kernels_in_workers_s": o.worker_s - o.gpu_s, "parent_and_pipe_s": o.run_s - o.worker_s,
            "startup": o.startup}


def outside(f: dict) -> float:
    """A run's time outside kernels: its run phase less its event-timed kernel time."""
    return f["run_s"] - f["kernel_s"]


def order(pairs: int, lead: str = "gpus1") -> list[tuple[str, str]]:
    """(run name, kind): the cold plain run, then each pair, the first of a pair alternating, `lead` first."""
    runs = [("plain_cold", "plain")]
    other = "plain" if lead == "gpus1" else "gpus1"
    for i in range(1, pairs + 1):
        kinds = (lead, other) if i % 2 else (other, lead)
        runs += [(f"{k}_{i}", k) for k in kinds]
    return runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/step4_space.yaml")
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--pairs", type=int, default=3, help="plain and --gpus 1 pairs after the cold run")
    ap.add_argument("--lead", choices=("gpus1", "plain"), default="gpus1",
                    help="the kind that runs first in odd pairs (the other leads even pairs)")
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--compile-first", metavar="ARCH",
                    help="compile for ARCH (e.g. sm_90) instead of the measured cold run")
    ap.add_argument("--max-seconds", type=float, help="start no pair that would end after this many seconds")
    args = ap.parse_args()
    t0 = time.perf_counter()
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    os.environ["NNBENCH_CACHE"] = tempfile.mkdtemp(prefix="nnbench-cubins-")  # empty: the first run compiles all
    got: dict = {"git_sha": results.git_sha(), "cache": os.environ["NNBENCH_CACHE"]}
    runs = order(args.pairs, args.lead)
    if args.compile_first:
        for spec in config.load_config(Path(args.config)):
            st = sweep.compile_only(spec, args.compile_first)
            print(f"compiled first for {args.compile_first}: {st.compiled} compiled, {st.cached} cached, "
                  f"{st.failed} failed, {st.wall_s:.1f} s", flush=True)
        runs = runs[1:]
    longest = 0.0
    for name, kind in runs:
        elapsed = time.perf_counter() - t0
        partner = f"{'plain' if kind == 'gpus1' else 'gpus1'}_{name.rsplit('_', 1)[1]}"
        if args.max_seconds and partner not in got and elapsed + 2 * longest > args.max_seconds:
            print(f"stopped before {name}: {elapsed:.0f} s + 2 x {longest:.0f} s > --max-seconds", flush=True)
            break
        r0 = time.perf_counter()
        specs = config.load_config(Path(args.config))
        o = api.run_sweep(specs, backend=args.backend, out=out / f"{name}.csv",
                          gpus=[0] if kind == "gpus1" else None).outcomes[0]
        got[name] = f = figures(o)
        st = f["startup"] or {}
        print(f"{name}: {f['cases']} cases, {f['samples']} samples ({f['cases_beyond_first_batch']} beyond the "
              f"first batch), run {f['run_s']:.2f} s (whole {f['wall_s']:.2f} s, compile "
              f"{f['compile_wall_s']:.1f} s: {f['compiled']} compiled, {f['cached']} cached), "
              f"kernels {f['kernel_s']:.2f} s, "
              f"overhead {100 * f['overhead_run']:.2f}% of the run ({100 * f['overhead_whole']:.2f}% of the whole); "
              f"in workers outside kernels {f['outside_kernels_in_workers_s']:.2f} s, parent and pipe "
              f"{f['parent_and_pipe_s']:.2f} s, first record after {f['first_record_s']:.2f} s; worker start-up "
              + ", ".join(f"{k} {v:.2f}" for k, v in st.items()), flush=True)
        longest = max(longest, time.perf_counter() - r0)
    done = [i for i in range(1, args.pairs + 1) if f"gpus1_{i}" in got and f"plain_{i}" in got]
    ratios = [got[f"gpus1_{i}"]["run_s"] / got[f"plain_{i}"]["run_s"] - 1 for i in done]
    if ratios:
        got["gpus1_over_plain_run"] = ratios
        got["gpus1_over_plain_run_median"] = statistics.median(ratios)
        print("--gpus 1 over plain, run phase, per pair: " + ", ".join(f"{100 * r:+.2f}%" for r in ratios)
              + f"; median {100 * statistics.median(ratios):+.2f}%")
        # The run phase's difference splits into kernel time (how many samples the stopping rule drew:
        # a lottery on the few bimodal cases, lab/journal/sweep.md) and the time outside kernels
        # (what the path itself costs).
        split = [(got[f"gpus1_{i}"]["kernel_s"] - got[f"plain_{i}"]["kernel_s"],
                  outside(got[f"gpus1_{i}"]) - outside(got[f"plain_{i}"]),
                  got[f"gpus1_{i}"]["samples"] - got[f"plain_{i}"]["samples"]) for i in done]
        got["gpus1_less_plain_kernel_outside_samples"] = split
        print("--gpus 1 less plain, per pair: " + ", ".join(f"kernels {k:+.2f} s, outside kernels {o:+.2f} s, "
                                                          f"{n:+d} samples" for k, o, n in split))
    (out / "overhead.json").write_text(json.dumps(got, indent=1) + "\n")


if __name__ == "__main__":
    main()
