"""Issue 29's measurement targets on a GPU, in one process where a sweep's worker would cost too much.

Not the CLI because: 40 runs of the gate's cases must share one process (compile once, the CUDA
context once) to fit the device time, the planted slowdowns are compiled in and out of the same
process (NNBENCH_PLANT is read at each compile), and the energy check must read nvidia-smi's power
log against the exact timed window. Every number comes from nnbench's own `measure` and harness.

  python3 lab/scripts/measurement_targets.py OUT_DIR [--pairs 20] [--parts nvml,energy,overhead,planted,noisy,pairs]
      [--deadline SECONDS] [--pair-shapes subset|all] [--calibration N,N,...]

--deadline: the pairs part starts no new pair of runs after this many seconds since the script started (a
device call's time is bounded); --pair-shapes all runs every case of configs/ci.yaml (default), subset the
29 cases of the first session (GEMM at two shapes, conv at its ResNet layer).

Writes into OUT_DIR:
  targets.json      every summary figure (the energy comparison, NVML call costs, calibration, verdicts);
  smi.csv           nvidia-smi's power log during the energy loop;
  pairs.jsonl       the false-alarm runs: every record with its raw samples, run index in `sweep`;
  planted.jsonl     the planted-slowdown and noisy runs, likewise;
  overhead.log      the overhead sweeps' output (this tree against base29/, the code before issue 29);
  overhead_ab.jsonl the in-process comparison of measure's loop: before issue 29, at HEAD of main, now;
  log.txt           progress.
The verdicts are recomputed from the JSON files on any machine by lab/scripts/measurement_verdicts.py.
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

HERE = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(HERE))

from nnbench import config, harness, rawresults, results, safeio  # noqa: E402
from nnbench.runtime.cuda import CudaBackend  # noqa: E402

OUT = Path(sys.argv[1])
ARGS = sys.argv[2:]
PAIRS = int(ARGS[ARGS.index("--pairs") + 1]) if "--pairs" in ARGS else 20
CALIBRATION = [int(x) for x in (ARGS[ARGS.index("--calibration") + 1] if "--calibration" in ARGS
                                else "16,32,64,128,512").split(",")]
DEADLINE = float(ARGS[ARGS.index("--deadline") + 1]) if "--deadline" in ARGS else float("inf")
PAIR_SHAPES_ALL = (ARGS[ARGS.index("--pair-shapes") + 1] if "--pair-shapes" in ARGS else "all") == "all"
T_START = time.perf_counter()
ALL_PARTS = "nvml,energy,overhead,planted,noisy,pairs"
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
CI = {spec.workload_name: spec for spec in config.load_config(HERE / "configs" / "ci.yaml")}


SESSIONS: dict = {}  # (suite, shape label) -> its session, prepared once: inputs and reference made once
COMPILED: dict = {}  # (suite, plant) -> Case -> Compiled


def run_part(spec, shape_labels, variants=None, vendor=True, tag="", sink=None, plant: int = 0):
    """One run of the ci.yaml part `spec`, restricted to some shapes (and variants), as harness.run runs
    it (vendor rows, then each case: verified, then timed by measure with the part's settings), but on
    sessions kept from run to run, so the float64 references are computed once per process."""
    work = spec.workload
    cases = [c for c in spec.cases if variants is None or c.variant.name in variants]
    key = (spec.workload_name, plant, tuple(c.variant.name for c in cases))  # compiled for these cases only
    if key not in COMPILED:
        if plant:
            os.environ["NNBENCH_PLANT"] = f"PLANT_SLOWDOWN={plant}"
        try:
            COMPILED[key] = work.compile(BE.arch, cases)
        finally:
            os.environ.pop("NNBENCH_PLANT", None)
    compiled = COMPILED[key]
    out = []
    for shape in [s for s in spec.shapes if s.label in shape_labels]:
        key = (spec.workload_name, shape.label)
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


def gemm4096(budget_s: float, max_noise: float = 0.0, min_samples: int = 10) -> dict:
    """Ladder step 7 (double_buffered) at 4096^3 for `budget_s` seconds (with max_noise 0 the stop rule is
    never met), on a session kept for the process (its float64 reference made once)."""
    from dataclasses import replace

    from nnbench.workloads.gemm.session import Shape
    spec, shape = CI["gemm"], Shape(4096, 4096, 4096)
    if ("gemm", 0) not in COMPILED:
        COMPILED["gemm", 0] = spec.workload.compile(BE.arch, spec.cases)
    if ("gemm", "4096") not in SESSIONS:
        session = spec.workload.session(BE, spec.settings, spec.rtol, 1, dict(ENV))
        session.warm_up()
        session.prepare(shape)
        SESSIONS["gemm", "4096"] = session
    session = SESSIONS["gemm", "4096"]
    session.settings = replace(spec.settings, budget_s=budget_s, min_samples=min_samples, max_noise=max_noise)
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

    def start(self, expect_s=0.0):
        t_start(self, expect_s)
        self._wall0 = time.time()

    def stop(self):
        t_stop(self)
        windows.append((self._wall0, time.time(), self.energy_j, self.window_s))
    nvml_mod.Telemetry.start, nvml_mod.Telemetry.stop = start, stop
    # Short windows (the fix fd304dc: under ENERGY_COUNTER_S the power is the probes' mean), as configs/ci.yaml
    # times a case (budget 0.5 s, 20 samples, 1% noise: a window of tens of ms), and of 0.2 s and 0.5 s; the
    # first one straight after idle, the rest right after the 2 s loop; each against the 2 s loop's counter.
    shorts = []  # (label, record, window index)
    try:
        shorts.append(("ci-style after idle", gemm4096(0.5, 0.01, 20), len(windows) - 1))
        time.sleep(0.5)
        recs = [gemm4096(2.0)]
        long_idx = len(windows) - 1
        for i in range(3):
            shorts.append((f"ci-style #{i + 1}", gemm4096(0.5, 0.01, 20), len(windows) - 1))
        shorts.append(("0.2 s window", gemm4096(0.2), len(windows) - 1))
        shorts.append(("0.5 s window", gemm4096(0.5), len(windows) - 1))
    finally:
        nvml_mod.Telemetry.start, nvml_mod.Telemetry.stop = t_start, t_stop
    time.sleep(1.0)
    smi.terminate()
    smi.wait()
    rec = recs[-1]
    w0, w1, e_j, win_s = windows[long_idx]
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
        "energy_method": rec.get("energy_method"),
    }
    short_out = []
    for label, r, idx in shorts:
        s0, s1, _, s_win = windows[idx]
        pts_in = [p for p in pts if s0 - 0.05 <= p[0] <= s1 + 0.05]
        inst_in = [p[2] for p in pts_in if p[2] is not None]
        short_out.append({
            "label": label, "window_s": s_win, "samples": r["samples"], "median_ms": r["median_ms"],
            "energy_method": r.get("energy_method"), "power_w": r.get("power_w"), "energy_j": r.get("energy_j"),
            "long_power_w": rec.get("power_w"), "long_energy_j": rec.get("energy_j"),
            "power_vs_long": r["power_w"] / rec["power_w"] if r.get("power_w") and rec.get("power_w") else None,
            "energy_vs_long": r["energy_j"] / rec["energy_j"] if r.get("energy_j") and rec.get("energy_j") else None,
            "smi_points": len(pts_in), "smi_instant_w": float(np.mean(inst_in)) if inst_in else None,
            "power_vs_smi_instant": r["power_w"] / float(np.mean(inst_in)) if inst_in and r.get("power_w") else None,
            "sm_clock_mhz": r.get("sm_clock_mhz"), "throttle": r.get("throttle"), "dropped": r.get("dropped")})
    SUMMARY["energy_short"] = short_out
    log("energy:", json.dumps(SUMMARY["energy"]))
    log("energy_short:", json.dumps(short_out))


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
    t0 = time.perf_counter()
    for _ in range(200):
        nv.probe()
    costs["probe_idle_us"] = (time.perf_counter() - t0) / 200 * 1e6
    SUMMARY["nvml"] = costs
    log("nvml:", json.dumps(costs))


# -- C, D: planted slowdowns, calibrated to 3% and 20%; the 20% one under a concurrent GPU load ----
CONV_SHAPE = "N32 C64 56x56 K64 3x3 p1"


def conv_direct(plant: int, tag: str, sink):
    recs = run_part(CI["conv"], {CONV_SHAPE}, {"direct"}, vendor=False, tag=tag, sink=sink, plant=plant)
    rec = [r for r in recs if r["variant"] == "direct"][0]
    assert rec["status"] == "PASS", rec
    return rec


def _interpolate(calib: dict, target: float) -> int:
    """N for a `target` slowdown, linear between the two measured points around it (or the nearest two)."""
    pts = sorted(calib.items())
    pairs = list(zip(pts, pts[1:]))
    (n0, c0), (n1, c1) = next(((a, b) for a, b in pairs if a[1] <= target <= b[1]),
                              pairs[0] if target < pts[0][1] else pairs[-1])
    return max(1, round(n0 + (target - c0) * (n1 - n0) / (c1 - c0))) if c1 != c0 else n1


def part_planted() -> None:
    sink = rawresults.JsonSink(OUT / "planted.jsonl", safeio.APPEND)
    try:
        clean = conv_direct(0, "calib-clean", sink)["median_ms"]
        calib = {}
        # Interpolated between measured points around the targets (PLANT_SLOWDOWN spins N x 128 cycles; the
        # __nanosleep it used before slept in power-of-two steps, and no N gave 3%).
        for n in CALIBRATION:
            calib[n] = conv_direct(n, f"calib-{n}", sink)["median_ms"] / clean - 1
            log(f"calibration: PLANT_SLOWDOWN={n}: {100 * calib[n]:+.2f}%")
        n3, n20 = _interpolate(calib, 0.03), _interpolate(calib, 0.20)
        slope = None
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
import random, sys, time, torch
# An intermittent load: a 2048^2 matmul now and then, so that some samples of the measured kernel share the
# GPU and others do not (noise of the planted change's own size, not a uniformly slower GPU).
a = torch.randn(2048, 2048, device="cuda"); b = torch.randn(2048, 2048, device="cuda")
open(sys.argv[1], "w").write("ready")
end = time.time() + float(sys.argv[2])
rng = random.Random(1)
while time.time() < end:
    c = a @ b
    c = a @ b
    torch.cuda.synchronize()
    time.sleep(rng.uniform(0.0, 0.012))
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
    # "before": the tree this branch started from (lab/scripts/device_measurement.sh unpacks it into base29/)
    root = HERE / "base29" if (HERE / "base29" / "nnbench").is_dir() else None
    site = "/tmp/nnbench-gpu-site"
    cfg = HERE / "configs" / "overhead.yaml"
    trees = [("this", HERE)] + ([("before", root)] if root else [])
    found = []
    with open(OUT / "overhead.log", "a") as logf:
        for rnd in range(3):
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
    overhead_ab(root)


def _old_measure(path: Path, name: str):
    """A measure.py of another commit, loaded as its own module (it imports nothing of nnbench)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def overhead_ab(root) -> None:
    """measure's own loop, in one process on the same launches: the code before issue 29 (base29/), main's
    HEAD before this change (head29/), and this tree with and without NVML. Each variant times each case of
    lab/configs/overhead.yaml for a fixed 0.06 s (max_noise 0: the stop rule never ends it early), in two rounds that
    alternate the order; the kernel's share of that wall time is what the harness leaves to the kernel. The
    host-issued settings (a PyTorch eager row's) are compared the same way, between HEAD and now."""
    from nnbench import measure as now_mod
    variants = {"now": now_mod}
    if root is not None:
        variants["before"] = _old_measure(root / "nnbench" / "measure.py", "measure_before29")
    if (HERE / "head29" / "measure.py").is_file():
        variants["head"] = _old_measure(HERE / "head29" / "measure.py", "measure_head29")
    rows = []
    real = now_mod.measure
    budget = 0.06

    def run_variant(name, launch, hot: bool):
        mod = variants["now" if name == "now-nvml-off" else name]
        kw = dict(budget_s=budget, min_samples=10, max_noise=0.0)
        if not hot:
            if not hasattr(mod.TimingSettings(), "host_issued"):
                return None
            kw["host_issued"] = True
        settings = mod.TimingSettings(**kw)
        tel_off = name == "now-nvml-off"
        saved = BE.telemetry
        if tel_off:
            BE.telemetry = lambda: None
        try:
            t0 = time.perf_counter()
            st = (real if mod is now_mod else mod.measure)(BE, launch, settings)
            wall = time.perf_counter() - t0
        finally:
            BE.telemetry = saved
        kernel = st.gpu_ms / 1e3  # every event-timed launch: warm-up, estimate, kept and dropped samples
        return {"wall_s": wall, "kernel_s": kernel, "samples": st.samples, "reps": st.reps,
                "median_ms": st.median_ms}

    def patched(backend, launch, settings=now_mod.TimingSettings()):
        label = CURRENT[0]
        order = ["before", "head", "now", "now-nvml-off"]
        order = [v for v in order if v in variants or v == "now-nvml-off"]
        for rnd in range(2):
            for name in (order if rnd % 2 == 0 else order[::-1]):
                for hot in (True, False):
                    got = run_variant(name, launch, hot)
                    if got is not None:
                        rows.append(dict(case=label, variant=name, round=rnd, mode="hot" if hot else "host-issued",
                                         **got))
        return real(backend, launch, settings)

    CURRENT = [""]
    spec = config.load_config(HERE / "configs" / "overhead.yaml")[0]
    work = spec.workload
    compiled = work.compile(BE.arch, spec.cases)
    session = work.session(BE, spec.settings, spec.rtol, spec.seed, dict(ENV))
    session.warm_up()
    now_mod.measure = patched
    try:
        for shape in spec.shapes:
            session.prepare(shape)
            for case in spec.cases:
                if work.applies(case, shape) and not work.refusal(case, shape):
                    CURRENT[0] = f"{case.variant.name} {shape.label}"
                    session.run_case(case, shape, compiled.get(case))
    finally:
        now_mod.measure = real
    with open(OUT / "overhead_ab.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    summary = {}
    for mode in ("hot", "host-issued"):
        for name in ("before", "head", "now", "now-nvml-off"):
            sel = [r for r in rows if r["variant"] == name and r["mode"] == mode]
            if sel:
                wall, kern = sum(r["wall_s"] for r in sel), sum(r["kernel_s"] for r in sel)
                summary[f"{mode} {name}"] = {"runs": len(sel), "wall_s": wall, "kernel_s": kern,
                                             "outside_kernel_pct": 100 * (1 - kern / wall)}
    SUMMARY["overhead_ab"] = summary
    log("overhead_ab:", json.dumps(summary))
    save()


# -- F: back-to-back identical runs of the gate's cases, in one process -----------------------------
PAIR_SHAPES = {"gemm": {"1000×777×1234", "2048×2048×2048"}, "conv": {CONV_SHAPE}}


def part_pairs() -> None:
    """Back-to-back identical runs of configs/ci.yaml (every part and shape, or the first session's subset) in
    one process; run 2k is the baseline of run 2k+1. A new pair starts only while the deadline allows."""
    sink = rawresults.JsonSink(OUT / "pairs.jsonl", safeio.APPEND)
    t0 = time.perf_counter()
    shapes = {suite: {s.label for s in CI[suite].shapes} for suite in CI} if PAIR_SHAPES_ALL else PAIR_SHAPES
    per_run = []
    try:
        for i in range(2 * PAIRS):
            if i % 2 == 0 and per_run and time.perf_counter() - T_START + 2 * max(per_run) > DEADLINE:
                log(f"pairs: stopped before run {i}: the deadline ({DEADLINE:.0f} s) leaves no time for a pair")
                break
            t_run = time.perf_counter()
            for suite, labels in shapes.items():
                t_part = time.perf_counter()
                recs = run_part(CI[suite], labels, vendor=CI[suite].vendor, tag=f"run-{i}", sink=sink)
                log(f"pairs: run {i} {suite}: {len(recs)} records in {time.perf_counter() - t_part:.1f} s")
            per_run.append(time.perf_counter() - t_run)
            log(f"pairs: run {i} done at {time.perf_counter() - t0:.1f} s")
            SUMMARY["pairs"] = {"runs_done": i + 1, "seconds": time.perf_counter() - t0, "all_cases": PAIR_SHAPES_ALL,
                                "seconds_per_run": per_run}
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
