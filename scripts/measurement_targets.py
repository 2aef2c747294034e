"""Issue 29's measurement targets on a GPU, in one process where a sweep's worker would cost too much.

Not the CLI because: 40 runs of the gate's cases must share one process (compile once, the CUDA
context once) to fit the device time, the planted slowdowns are compiled in and out of the same
process (NNBENCH_PLANT is read at each compile), and the energy check must read nvidia-smi's power
log against the exact timed window. Every number comes from nnbench's own `measure` and harness.

  python3 scripts/measurement_targets.py OUT_DIR [--pairs 20] [--parts energy,nvml,planted,noisy,overhead,pairs]

Writes into OUT_DIR:
  targets.json      every summary figure (the energy comparison, NVML call costs, calibration, verdicts);
  smi.csv           nvidia-smi's power log during the energy loop;
  pairs.jsonl       the false-alarm runs: every record with its raw samples, run index in `sweep`;
  planted.jsonl     the planted-slowdown and noisy runs, likewise;
  overhead.log      the overhead sweeps' output (this tree against the checkout's root, the code before);
  log.txt           progress.
The verdicts are recomputed from the JSON files on any machine by scripts/measurement_verdicts.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))

from nnbench import config, harness, rawresults, results, safeio  # noqa: E402
from nnbench.runtime.cuda import CudaBackend  # noqa: E402

OUT = Path(sys.argv[1])
ARGS = sys.argv[2:]
PAIRS = int(ARGS[ARGS.index("--pairs") + 1]) if "--pairs" in ARGS else 20
ALL_PARTS = "energy,nvml,planted,noisy,overhead,pairs"
PARTS = (ARGS[ARGS.index("--parts") + 1] if "--parts" in ARGS else ALL_PARTS).split(",")
SUMMARY: dict = {}
LOG = open(OUT / "log.txt", "a", buffering=1)


def log(*a) -> None:
    line = " ".join(str(x) for x in a)
    print(line, flush=True)
    LOG.write(f"{time.strftime('%H:%M:%S')} {line}\n")


def save() -> None:
    (OUT / "targets.json").write_text(json.dumps(SUMMARY, indent=1, default=str))


BE = CudaBackend(0)
ENV = results.environment(BE)
SUMMARY["env"] = ENV
CI = {spec.suite: spec for spec in config.load_config(HERE / "configs" / "ci.yaml")}


SESSIONS: dict = {}  # (suite, shape label) -> its session, prepared once: inputs and reference made once
COMPILED: dict = {}  # (suite, plant) -> Case -> Compiled


def run_part(spec, shape_labels, variants=None, vendor=True, tag="", sink=None, plant: int = 0):
    """One run of the ci.yaml part `spec`, restricted to some shapes (and variants), as harness.run runs
    it (vendor rows, then each case: verified, then timed by measure with the part's settings), but on
    sessions kept from run to run, so the float64 references are computed once per process."""
    work = spec.workload
    cases = [c for c in spec.cases if variants is None or c.variant.name in variants]
    if (spec.suite, plant) not in COMPILED:
        if plant:
            os.environ["NNBENCH_PLANT"] = f"PLANT_SLOWDOWN={plant}"
        try:
            COMPILED[spec.suite, plant] = work.compile(BE.arch, spec.cases)
        finally:
            os.environ.pop("NNBENCH_PLANT", None)
    compiled = COMPILED[spec.suite, plant]
    out = []
    for shape in [s for s in spec.shapes if s.label in shape_labels]:
        key = (spec.suite, shape.label)
        if key not in SESSIONS:
            session = work.session(BE, spec.settings, spec.rtol, spec.seed, dict(ENV))
            session.warm_up()
            session.prepare(shape)
            SESSIONS[key] = session
        session = SESSIONS[key]
        recs = [session.run_vendor(name, shape) for name in work.vendor_names("cuda")] if vendor else []
        for case in cases:
            if work.applies(case, shape) and not work.refusal(case, shape):
                recs.append(session.run_case(case, shape, compiled.get(case)))
        for rec in recs:
            if rec is None:
                continue
            rec["sweep"] = tag
            if sink is not None:
                sink.append(rec)
            out.append(rec)
    return out


def gemm4096(budget_s: float) -> dict:
    """Ladder step 7 (double_buffered) at 4096^3 for `budget_s` seconds (the stop rule never met), on a
    session kept for the process (its float64 reference made once)."""
    from dataclasses import replace

    from nnbench.suites.gemm import Shape
    spec, shape = CI["gemm"], Shape(4096, 4096, 4096)
    if ("gemm", 0) not in COMPILED:
        COMPILED["gemm", 0] = spec.workload.compile(BE.arch, spec.cases)
    if ("gemm", "4096") not in SESSIONS:
        session = spec.workload.session(BE, spec.settings, spec.rtol, 1, dict(ENV))
        session.warm_up()
        session.prepare(shape)
        SESSIONS["gemm", "4096"] = session
    session = SESSIONS["gemm", "4096"]
    session.settings = replace(spec.settings, budget_s=budget_s, min_samples=10, max_noise=0.0)
    case = next(c for c in spec.cases if c.variant.name == "double_buffered")
    rec = session.run_case(case, shape, COMPILED["gemm", 0].get(case))
    return harness.Comparisons(spec.workload).derive(rec)


# -- A: energy of a 2 s GEMM loop against nvidia-smi's power x time --------------------------------
def part_energy() -> None:
    smi_path = OUT / "smi.csv"
    gemm4096(0.05)  # compile, load, reference: before the power log starts
    fields = "timestamp,power.draw,power.draw.instant,clocks.sm,clocks_event_reasons.active"
    probe = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True)
    if probe.returncode != 0 or "Field" in probe.stdout + probe.stderr:
        fields = "timestamp,power.draw,clocks.sm"
    smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,nounits", "-lms", "100"],
                           stdout=open(smi_path, "w"), stderr=subprocess.STDOUT)
    time.sleep(1.5)
    windows = []
    from nnbench.runtime import nvml as nvml_mod
    t_start, t_stop = nvml_mod.Telemetry.start, nvml_mod.Telemetry.stop

    def start(self):
        t_start(self)
        self._wall0 = time.time()

    def stop(self):
        t_stop(self)
        windows.append((self._wall0, time.time(), self.energy_j, self.window_s))
    nvml_mod.Telemetry.start, nvml_mod.Telemetry.stop = start, stop
    try:
        recs = [gemm4096(2.0)]
    finally:
        nvml_mod.Telemetry.start, nvml_mod.Telemetry.stop = t_start, t_stop
    time.sleep(1.0)
    smi.terminate()
    smi.wait()
    rec = recs[-1]
    w0, w1, e_j, win_s = windows[-1]
    lines = smi_path.read_text().splitlines()
    head = [h.strip() for h in lines[0].split(",")]
    pts = []
    for ln in lines[1:]:
        cells = [c.strip() for c in ln.split(",")]
        if len(cells) != len(head):
            continue
        try:
            ts = time.mktime(time.strptime(cells[0].split(".")[0], "%Y/%m/%d %H:%M:%S")) + float(
                "0." + cells[0].split(".")[1])
            pts.append((ts, float(cells[1]), float(cells[2]) if "power.draw.instant" in head[2] else None))
        except (ValueError, IndexError):
            continue
    inside = [p for p in pts if w0 <= p[0] <= w1]
    avg_w = float(np.mean([p[1] for p in inside])) if inside else None
    inst = [p[2] for p in inside if p[2] is not None]
    avg_inst = float(np.mean(inst)) if inst else None
    SUMMARY["energy"] = {
        "case": f"{rec['variant']} {rec['shape']}", "samples": rec["samples"], "median_ms": rec["median_ms"],
        "window_s": win_s, "nvml_energy_j": e_j, "nvml_power_w": rec.get("power_w"),
        "smi_points_in_window": len(inside), "smi_power_draw_w": avg_w, "smi_power_instant_w": avg_inst,
        "smi_energy_j": avg_w * win_s if avg_w else None,
        "smi_instant_energy_j": avg_inst * win_s if avg_inst else None,
        "ratio_nvml_over_smi": e_j / (avg_w * win_s) if avg_w and e_j else None,
        "ratio_nvml_over_smi_instant": e_j / (avg_inst * win_s) if avg_inst and e_j else None,
        "energy_j_per_launch": rec.get("energy_j"), "gflops_per_j": rec.get("gflops_per_j"),
        "sm_clock_mhz": rec.get("sm_clock_mhz"), "sm_clock_min_mhz": rec.get("sm_clock_min_mhz"),
        "mem_clock_mhz": rec.get("mem_clock_mhz"), "throttle": rec.get("throttle"),
        "clocks_locked": rec.get("clocks_locked"), "dropped": rec.get("dropped"), "smi_fields": fields,
    }
    log("energy:", json.dumps(SUMMARY["energy"]))


# -- B: what NVML costs per call, and how often the energy counter moves ---------------------------
def part_nvml() -> None:
    nv = BE.nvml
    costs = {}
    for name, fn in [("clock_sm", lambda: nv.clock("sm")), ("clock_mem", lambda: nv.clock("mem")),
                     ("reasons", nv.reasons), ("energy", nv.energy_mj), ("probe", nv.probe),
                     ("power", nv.power_w), ("instant_power", nv.instant_power_w)]:
        fn()
        t0 = time.perf_counter()
        for _ in range(200):
            fn()
        costs[name + "_us"] = (time.perf_counter() - t0) / 200 * 1e6
    # The energy counter's update interval under load: a stream of GEMMs queued, the counter polled.
    vals = []
    import threading
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            vals.append((time.perf_counter(), nv.energy_mj()))
            time.sleep(0.0002)
    th = threading.Thread(target=poll)
    th.start()
    gemm4096(0.6)
    stop.set()
    th.join()
    changes = [vals[i][0] for i in range(1, len(vals)) if vals[i][1] != vals[i - 1][1]]
    gaps = np.diff(changes) * 1e3 if len(changes) > 2 else np.array([])
    costs["energy_counter_polls"] = len(vals)
    costs["energy_counter_changes"] = len(changes)
    costs["energy_counter_update_ms_median"] = float(np.median(gaps)) if gaps.size else None
    costs["energy_counter_update_ms_p90"] = float(np.percentile(gaps, 90)) if gaps.size else None
    costs["power_limits_w"] = nv.power_limits_w()
    costs["power_method"] = nv.power_method
    SUMMARY["nvml"] = costs
    log("nvml:", json.dumps(costs))


# -- C, D: planted slowdowns, calibrated to 3% and 20%; the 20% one under a concurrent GPU load ----
CONV_SHAPE = "N32 C64 56x56 K64 3x3 p1"


def conv_direct(plant: int, tag: str, sink):
    recs = run_part(CI["conv"], {CONV_SHAPE}, {"direct"}, vendor=False, tag=tag, sink=sink, plant=plant)
    rec = [r for r in recs if r["variant"] == "direct"][0]
    assert rec["status"] == "PASS", rec
    return rec


def part_planted() -> None:
    sink = rawresults.JsonSink(OUT / "planted.jsonl", safeio.APPEND)
    try:
        clean = conv_direct(0, "calib-clean", sink)["median_ms"]
        calib = {}
        for n in (4, 16, 64):
            calib[n] = conv_direct(n, f"calib-{n}", sink)["median_ms"] / clean - 1
            log(f"calibration: PLANT_SLOWDOWN={n}: {100 * calib[n]:+.2f}%")
        # slowdown against N: fit a line through the origin on the points below 40%
        pts = [(n, c) for n, c in calib.items() if 0 < c < 0.4] or list(calib.items())
        slope = sum(n * c for n, c in pts) / sum(n * n for n, _ in pts)
        n3, n20 = max(1, round(0.03 / slope)), max(1, round(0.20 / slope))
        SUMMARY["calibration"] = {"clean_ms": clean, "slowdown_by_n": calib, "slope": slope, "n3": n3, "n20": n20}
        log("calibration:", SUMMARY["calibration"])
        save()
        for i in range(PAIRS):
            conv_direct(0, f"clean-{i}", sink)
            conv_direct(n3, f"plant3-{i}", sink)
        SUMMARY["planted"] = {"runs": PAIRS}
        save()
    finally:
        sink.close()


LOAD = """
import os, sys, time, torch
a = torch.randn(4096, 4096, device="cuda"); b = torch.randn(4096, 4096, device="cuda")
open(sys.argv[1], "w").write("ready")
end = time.time() + float(sys.argv[2])
while time.time() < end:
    for _ in range(4):
        c = a @ b
    torch.cuda.synchronize()
    time.sleep(0.002 * (hash(time.time()) % 5))
"""


def part_noisy() -> None:
    n20 = SUMMARY.get("calibration", {}).get("n20", 64)
    sink = rawresults.JsonSink(OUT / "planted.jsonl", safeio.APPEND)
    ready = Path("/tmp/nnbench-load-ready")
    ready.unlink(missing_ok=True)
    load = subprocess.Popen([sys.executable, "-c", LOAD, str(ready), "60"])
    try:
        t0 = time.time()
        while not ready.exists() and time.time() - t0 < 60:
            time.sleep(0.2)
        log(f"concurrent load ready after {time.time() - t0:.1f} s")
        for i in range(10):
            conv_direct(n20, f"noisy20-{i}", sink)
        for i in range(3):
            conv_direct(0, f"noisy0-{i}", sink)
    finally:
        load.kill()
        load.wait()
        sink.close()
    SUMMARY["noisy"] = {"n20": n20, "runs": 10}
    save()


# -- E: the harness's cost: a sweep's "overhead outside kernels", this tree against the code before ---
def part_overhead() -> None:
    # "before": the tree this branch started from (scripts/device_measurement.sh unpacks it into base29/)
    root = HERE / "base29" if (HERE / "base29" / "nnbench").is_dir() else None
    site = "/tmp/nnbench-gpu-site"
    cfg = HERE / "configs" / "overhead.yaml"
    trees = [("this", HERE)] + ([("before", root)] if root else [])
    found = []
    with open(OUT / "overhead.log", "a") as logf:
        for rnd in range(2):
            for name, tree in (trees if rnd % 2 == 0 else trees[::-1]):
                env = dict(os.environ, PYTHONPATH=f"{site}:{tree}", PYTHONUNBUFFERED="1", COLUMNS="200")
                env.pop("NNBENCH_PLANT", None)
                out = Path(f"/tmp/overhead-{name}-{rnd}.csv")
                out.unlink(missing_ok=True)
                t0 = time.perf_counter()
                p = subprocess.run([sys.executable, "-m", "nnbench", "sweep", str(cfg), "--fresh", "--out", str(out)],
                                   cwd=tree, env=env, capture_output=True, text=True)
                text = p.stdout + p.stderr
                logf.write(f"=== {name} round {rnd} ({tree}) rc={p.returncode} {time.perf_counter() - t0:.1f} s\n")
                logf.write(text[-3000:] + "\n")
                m = re.search(r"kernel time ([\d.]+) s · overhead outside kernels ([\d.]+)% of the run", text)
                r = re.search(r"ran (\d+) cases in ([\d.]+) s", text)
                found.append({"tree": name, "round": rnd, "rc": p.returncode,
                              "kernel_s": float(m.group(1)) if m else None,
                              "overhead_pct": float(m.group(2)) if m else None,
                              "cases": int(r.group(1)) if r else None, "run_s": float(r.group(2)) if r else None})
                log("overhead:", found[-1])
    SUMMARY["overhead"] = found
    save()


# -- F: back-to-back identical runs of the gate's cases, in one process -----------------------------
PAIR_SHAPES = {"gemm": {"1000×777×1234", "2048×2048×2048"}, "conv": {CONV_SHAPE}}


def part_pairs() -> None:
    sink = rawresults.JsonSink(OUT / "pairs.jsonl", safeio.APPEND)
    t0 = time.perf_counter()
    try:
        for i in range(2 * PAIRS):
            for suite, labels in PAIR_SHAPES.items():
                run_part(CI[suite], labels, vendor=CI[suite].vendor, tag=f"run-{i}", sink=sink)
            log(f"pairs: run {i} done at {time.perf_counter() - t0:.1f} s")
            SUMMARY["pairs"] = {"runs_done": i + 1, "seconds": time.perf_counter() - t0}
            save()
    finally:
        sink.close()


for part in PARTS:
    t = time.perf_counter()
    try:
        {"energy": part_energy, "nvml": part_nvml, "planted": part_planted, "noisy": part_noisy,
         "overhead": part_overhead, "pairs": part_pairs}[part]()
    except Exception:
        log(f"part {part} failed:\n{traceback.format_exc()}")
        SUMMARY.setdefault("failed", []).append(part)
    SUMMARY.setdefault("part_seconds", {})[part] = time.perf_counter() - t
    save()
log("done", SUMMARY.get("part_seconds"))
