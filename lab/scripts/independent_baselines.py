"""Time the vendor baselines with code that shares nothing with nnbench's harness, and compare with
nnbench's own rows from the same run (issue 25: every baseline row within 3% of an independent timing).

Independent means: plain CuPy and PyTorch, their own buffers, their own warm-up (10 calls), and the
median of 50 samples, each sample CUDA events around 20 back-to-back calls issued from Python; the cuDNN
samples wait on the GPU (torch.cuda._sleep) while Python issues them, so the host's pace is not timed. The
nnbench rows come from `nnbench gemm`, `nnbench conv --backward` and `nnbench train` run as commands.

What a process decides for itself is compared over fresh processes, in interleaved rounds: each round
runs nnbench's command and the independent code, each in a process of its own (which goes first
alternates), ROUNDS times, and the rows are compared as medians over rounds; every round's pair is
written too, with the spread.
- cuDNN autotunes once per process and convolution (PyTorch's benchmark mode), and its pick moves
  between processes: TF32 forward on N32 C64 56² K64 3x3 took 0.091 ms in one process and 0.100 in
  another. Both sides autotune twice, once per value of the deterministic flag (PyTorch keys its
  autotune cache on it, so each is a draw of its own), time both and keep the faster, as nnbench's
  cuDNN rows do; and both name the kernels each draw ran (the algorithm cuDNN chose), from PyTorch's
  profiler after the timing, so that a disagreement can be read off the kernels.
- PyTorch eager is host time (Python issuing ~400 kernels a step, the GPU waiting on them), and the
  host's speed moves between processes seconds apart: a fresh process's eager step took 3.6 to
  4.1 ms, nnbench's 3.4 to 5.2, in three rounds of one run (pinning both to the same CPUs did not
  help). So the independent PyTorch steps run in nnbench's own process, before nnbench's command
  (run in-process, as `python -m nnbench` would) and after it, and nnbench's row is compared with
  their mean: the timing code is independent, the host state is shared. Both freeze Python's
  collector over the heap that exists before their samples (gc.freeze), so that a step's garbage
  collections walk the step's own objects, not nnbench's or the script's.
  Within one process the eager step still wanders from 3.2 to 5.2 ms over seconds, whichever code times
  it (lab/scripts/eager_timing_probe.py, lab/journal/baselines.md), so one row against timings taken seconds
  before and after cannot agree within 3% except by chance. The round therefore ends with EAGER_PAIRS
  interleaved pairs in the same process: the independent loop, and nnbench's eager timer on nnbench's
  step program (suites/batched.py `time_torch_step`, suites/mlp.py `torch_program`), side by side; the
  pairs' median ratio, with a bootstrap interval, is the check of the eager row's timing.
- The profiler's after-effect: PyTorch's profiler leaves CUPTI subscribed unless TEARDOWN_CUPTI=1 is
  set when it stops; both sides set it, and the cuDNN process times a host-bound and a GPU-bound
  call before and after its profiling and writes the ratio.

Why a script, not the CLI: it is the check of the CLI's baselines, so it must not use the CLI's code.
Usage: python3 lab/scripts/independent_baselines.py OUTDIR [ROUNDS]   (GPU, PyTorch and CuPy; ROUNDS 5)
       python3 lab/scripts/independent_baselines.py --eager-pairs N OUTDIR   (N more eager pairs, one process)
       python3 lab/scripts/independent_baselines.py --conv    (one process: the four cuDNN rows, JSON)
       python3 lab/scripts/independent_baselines.py --train CSV    (PyTorch's Net 8 B=4096 steps, nnbench's train
                                                                in the same process, JSON)
"""

from __future__ import annotations

import csv
import gc
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

QUEUE_MS = 5.0  # the GPU's wait before each queued sample: longer than the host takes to issue 20 cuDNN calls
SLEEP_HZ = 1.98e9  # torch.cuda._sleep counts SM clock cycles; the H100's clock under load


def events_median_ms(fn, calls: int = 20, samples: int = 50, warmup: int = 10, queued: bool = False) -> float:
    """Median ms per call over `samples` samples of `calls` back-to-back calls between two events.
    queued: each sample waits on the GPU (torch.cuda._sleep) while the host issues it, so the calls run
    back to back whatever the host's pace; a 0.09 ms cuDNN call issued as the host goes read 3-6% slower
    than queued by nnbench (session 5's run, lab/journal/baselines.md). Not for host-bound steps."""
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(samples):
        if queued:
            torch.cuda._sleep(int(QUEUE_MS * 1e-3 * SLEEP_HZ))
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end) / calls)
    return statistics.median(out)


def cublas_sgemm(n: int) -> float:
    import cupy as cp
    from cupy_backends.cuda.libs import cublas
    a, b = cp.random.random((n, n), dtype=cp.float32), cp.random.random((n, n), dtype=cp.float32)
    c = cp.empty((n, n), dtype=cp.float32)
    h = cp.cuda.device.get_cublas_handle()
    cublas.setMathMode(h, cublas.CUBLAS_DEFAULT_MATH)
    one, zero = np.array([1.0], np.float32), np.array([0.0], np.float32)
    return events_median_ms(lambda: cublas.sgemm(h, 0, 0, n, n, n, one.ctypes.data, a.data.ptr, n, b.data.ptr, n,
                                                  zero.ctypes.data, c.data.ptr, n))


# -- cuDNN ------------------------------------------------------------------------------------------
LAYER = "N32 C64 56^2 K64 3x3"
CUDNN_ROWS = ("cudnn", "cudnn-tf32", "cudnn-backward", "cudnn-backward-tf32")  # nnbench's variant names
CONV_ARGS = ["conv", "--n", "32", "--c", "64", "--h", "56", "--w", "56", "--k", "64", "--r", "3", "--pad", "1",
             "-p", "direct", "--backward"]


def profiled_kernels(torch, fn) -> str:
    """The GPU kernels of one call of fn, in order, from PyTorch's profiler ('?' where it fails)."""
    try:
        torch.cuda.synchronize()
        os.environ["TEARDOWN_CUPTI"] = "1"  # read when the profiler stops: CUPTI unsubscribed
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        names = [e.name for e in prof.events() if "CUDA" in str(e.device_type)]
    except Exception as e:  # noqa: BLE001
        return f"? ({type(e).__name__})"
    short = []
    for n in names:  # "void ns::kernel<...>(args)" -> "ns::kernel"
        n = n.removeprefix("void ").split("(")[0].split("<")[0].strip()
        if n and not n.startswith(("Memcpy", "Memset")) and n not in short:
            short.append(n)
    return " + ".join(short) or "?"


def cudnn_rows() -> dict:
    """The four cuDNN rows of LAYER in this process: each autotuned twice (deterministic off, on:
    two keys of PyTorch's autotune cache), both timed, the faster kept; then each draw's kernels.
    Also the profiler's after-effect: a GPU-bound and a host-bound timing before and after it."""
    import torch
    import torch.nn.functional as F
    torch.backends.cudnn.benchmark = True
    x = torch.randn(32, 64, 56, 56, device="cuda")
    w = torch.randn(64, 64, 3, 3, device="cuda")
    dy = torch.randn(32, 64, 56, 56, device="cuda")

    def forward():
        return F.conv2d(x, w, padding=1)

    def backward():
        return torch.ops.aten.convolution_backward(dy, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                                                   [True, True, False])

    def flagged(fn, tf32: bool, deterministic: bool):
        def call():
            torch.backends.cudnn.allow_tf32, torch.backends.cudnn.deterministic = tf32, deterministic
            fn()
        return call

    timed = {}
    for name, fn, tf32 in zip(CUDNN_ROWS, (forward, forward, backward, backward), (False, True, False, True)):
        timed[name] = [(events_median_ms(flagged(fn, tf32, det), queued=True), det, flagged(fn, tf32, det))
                       for det in (False, True)]
    tiny = torch.zeros(16, device="cuda")
    host_before = events_median_ms(lambda: tiny.add_(1.0))
    out = {}
    for name, draws in timed.items():
        ms, det, _ = min(draws, key=lambda d: d[0])
        out[name] = dict(ms=ms, kept=f"deterministic {'on' if det else 'off'}",
                         draws=[dict(deterministic=d, ms=m, kernels=profiled_kernels(torch, call))
                                for m, d, call in draws])
    first = min(timed["cudnn"], key=lambda d: d[0])
    out["profiler_after_effect"] = dict(gpu_bound=events_median_ms(first[2], queued=True) / first[0],
                                        host_bound=events_median_ms(lambda: tiny.add_(1.0)) / host_before)
    return out


# -- PyTorch ----------------------------------------------------------------------------------------
def torch_step(layers, batch: int, graph: bool) -> float:
    """One mini-batch SGD step of the MLP in plain PyTorch (sigmoid units, squared error, momentum),
    written as the functional layers the seed's net is (weights and biases as tensors, F.linear):
    eager time is host time, and nn.Module's call overhead would time a different program."""
    import torch
    import torch.nn.functional as F
    torch.backends.cuda.matmul.allow_tf32 = False
    Ws = [torch.randn(b, a, device="cuda", requires_grad=True) for a, b in zip(layers, layers[1:])]
    bs = [torch.randn(b, device="cuda", requires_grad=True) for b in layers[1:]]
    opt = torch.optim.SGD([p for pair in zip(Ws, bs) for p in pair], lr=0.1, momentum=0.8)
    x, t = torch.rand(batch, layers[0], device="cuda"), torch.rand(batch, layers[-1], device="cuda")

    def model(o):
        for W, b in zip(Ws, bs):
            o = torch.sigmoid(F.linear(o, W, b))
        return o

    def step():
        opt.zero_grad(set_to_none=False)
        loss = 0.5 * ((t - model(x)) ** 2).sum() / batch
        loss.backward()
        opt.step()
    if not graph:
        gc.collect()
        gc.freeze()
        try:
            return events_median_ms(step, calls=5, samples=30)
        finally:
            gc.unfreeze()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    return events_median_ms(g.replay, calls=5, samples=30)


NET8 = (120, *[500] * 13, 100, 7)
TORCH_ARGS = ["train", "--net", "8", "--batch", "4096", "-v", "batched-cublas", "--compare", "torch", "--epochs", "1",
              "--no-letters"]
TORCH_ROWS = ("torch-eager", "torch-graph")


def steps() -> dict:
    import torch
    got = {"eager": torch_step(NET8, 4096, False), "graph": torch_step(NET8, 4096, True)}
    torch.cuda.empty_cache()
    return got


EAGER_PAIRS = 12  # interleaved eager timings a round, each side ~1 s


def nnbench_eager_timer(batch: int = 4096):
    """nnbench's side of the interleaved eager pairs: the eager row's own timer (suites/batched.py
    `time_torch_step`: measure, host-issued) on the row's own program (suites/mlp.py `torch_program`),
    Net 8 at `batch` on random data. Returns a call that times it once (ms)."""
    import torch

    from nnbench.runtime import open_backend
    from nnbench.workloads.train import batched
    from nnbench.workloads.train import mlp
    backend, _ = open_backend("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    Ws = [(torch.rand(b, a, device="cuda") - 0.5).mul_(0.2).requires_grad_() for a, b in zip(NET8, NET8[1:])]
    bs = [torch.zeros(b, device="cuda", requires_grad=True) for b in NET8[1:]]
    opt = torch.optim.SGD([p for pair in zip(Ws, bs) for p in pair], lr=0.1, momentum=0.8)
    X, T = torch.rand(2 * batch, NET8[0], device="cuda"), torch.rand(2 * batch, NET8[-1], device="cuda")
    sample, _, step_t = mlp.torch_program(Ws, bs, opt, X, T, batch)
    return lambda: batched.time_torch_step(backend, lambda: step_t(*sample(0)), True).median_ms


def eager_pairs(n: int) -> list[dict]:
    """n interleaved eager timings in this process: nnbench's timer on nnbench's program and the
    independent loop, side by side (which goes first alternates)."""
    ours = nnbench_eager_timer()
    pairs = []
    for k in range(n):
        got = {}
        for side in (("nnbench", "independent") if k % 2 else ("independent", "nnbench")):
            got[side] = ours() if side == "nnbench" else torch_step(NET8, 4096, False)
        pairs.append(got)
    return pairs


def write_pairs(path: Path, label, pairs: list[dict]) -> None:
    """Append pairs to the run's eager_pairs.csv (round = label)."""
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["round", "pair", "nnbench", "independent"])
        if f.tell() == 0:
            w.writeheader()
        w.writerows(dict(round=label, pair=k, **p) for k, p in enumerate(pairs))


def train_round(csv_path: str) -> dict:
    """This process: the independent steps, nnbench's train command (in-process, as `python -m
    nnbench` runs it), the independent steps again; then EAGER_PAIRS interleaved pairs of eager
    timings, the independent loop and nnbench's timer on nnbench's program (which goes first
    alternates), so that the host's drift over seconds falls on both sides alike."""
    import runpy
    out = {"before": steps()}
    sys.argv = ["nnbench", *TORCH_ARGS, "--csv", csv_path]
    try:
        runpy.run_module("nnbench", run_name="__main__", alter_sys=True)
    except SystemExit as e:
        out["nnbench_exit"] = e.code
    try:
        out["after"] = steps()
        out["eager_pairs"] = eager_pairs(EAGER_PAIRS)
    except Exception as e:  # noqa: BLE001 - the steps before nnbench still stand
        out["after_error"] = f"{type(e).__name__}: {e}"
    return out


# -- rounds -------------------------------------------------------------------------------------------
def run(args: list[str], log: Path) -> str:
    """A fresh process; its stdout, its stderr appended to log."""
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, check=False)
    with open(log, "a") as f:
        f.write(f"$ {' '.join(args)}  (exit {proc.returncode})\n{proc.stderr[-4000:]}\n")
    return proc.stdout


def nnbench_rows(out: Path, args: list[str], name: str) -> dict[str, dict]:
    path = out / f"{name}.csv"
    run(["-m", "nnbench", *args, "--csv", str(path)], out / "commands.log")
    return read_rows(path)


def read_rows(path: Path) -> dict[str, dict]:
    try:
        with open(path) as f:
            return {r["variant"]: r for r in csv.DictReader(f)}
    except OSError:
        return {}


def independent(mode: str, out: Path, *args: str) -> dict:
    text = run([__file__, mode, *args], out / "commands.log").strip()
    try:
        return json.loads(text.splitlines()[-1])
    except (ValueError, IndexError):
        return {}


def one_round(i: int, out: Path) -> list[dict]:
    """Round i's pairs: the cuDNN rows (nnbench's process first in even rounds), then the PyTorch rows."""
    pairs = []
    got: list = [None, None]
    for side in ((0, 1) if i % 2 == 0 else (1, 0)):
        got[side] = (nnbench_rows(out, CONV_ARGS, f"conv_round{i}") if side == 0 else independent("--conv", out))
    ours, theirs = got
    for name in CUDNN_ROWS:
        r, t = ours.get(name, {}), theirs.get(name, {})
        pairs.append(dict(baseline=f"{name} {LAYER} (ms)", round=i, nnbench=_float(r.get("median_ms")),
                          independent=t.get("ms", float("nan")), nnbench_note=r.get("tiles", ""),
                          independent_note=f"kept {t.get('kept', '?')} · " + "; ".join(
                              f"deterministic {'on' if d['deterministic'] else 'off'} {d['ms']:.4f} ms: {d['kernels']}"
                              for d in t.get("draws", []))))
    if "profiler_after_effect" in theirs:
        print(f"round {i}: the profiler's after-effect (after/before): {theirs['profiler_after_effect']}", flush=True)
    path = out / f"train_round{i}.csv"
    theirs = independent("--train", out, str(path))
    ours = read_rows(path)
    for name in TORCH_ROWS:
        mode = name.removeprefix("torch-")
        both = [theirs[k][mode] for k in ("before", "after") if k in theirs]
        pairs.append(dict(baseline=f"{name} Net 8 B=4096 step (ms)", round=i,
                          nnbench=_float(ours.get(name, {}).get("median_ms")),
                          independent=statistics.mean(both) if both else float("nan"), nnbench_note="",
                          independent_note=" · ".join(f"{k} nnbench {theirs[k][mode]:.4f} ms"
                                                      for k in ("before", "after") if k in theirs)
                          + theirs.get("after_error", "")))
    eager = theirs.get("eager_pairs", [])
    if eager:
        ratios = [p["nnbench"] / p["independent"] for p in eager]
        pairs.append(dict(baseline=f"torch-eager Net 8 B=4096 step, {len(eager)} interleaved pairs (ms)", round=i,
                          nnbench=statistics.median(p["nnbench"] for p in eager),
                          independent=statistics.median(p["independent"] for p in eager),
                          nnbench_note="nnbench's timer on nnbench's program, in the independent process",
                          independent_note=f"pairs' nnbench/independent: median {statistics.median(ratios):.4f}, "
                                           f"range {min(ratios):.3f}-{max(ratios):.3f}"))
        write_pairs(out / "eager_pairs.csv", i, eager)
    for p in pairs:
        print(f"round {i}: {p['baseline']:44} nnbench {p['nnbench']:.4f} independent {p['independent']:.4f}",
              flush=True)
    return pairs


def _float(text) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return float("nan")


def summary(key: str, mine: list[float], theirs: list[float]) -> dict:
    """Medians over rounds, their difference, and the spread: each side's range over rounds and the
    range of the rounds' own differences, all in % of the medians."""
    m, t = statistics.median(mine), statistics.median(theirs)
    rounds = [100 * (a / b - 1) for a, b in zip(mine, theirs)]
    return dict(baseline=key, nnbench=m, independent=t, difference_pct=100 * (m / t - 1), rounds=len(mine),
                nnbench_range_pct=100 * (max(mine) - min(mine)) / m,
                independent_range_pct=100 * (max(theirs) - min(theirs)) / t,
                round_difference_min_pct=min(rounds), round_difference_max_pct=max(rounds))


def read_pairs(path: Path) -> list[tuple[float, float]]:
    try:
        with open(path) as f:
            return [(float(r["nnbench"]), float(r["independent"])) for r in csv.DictReader(f)]
    except OSError:
        return []


def paired_ratio(pairs: list[tuple[float, float]], draws: int = 10_000) -> tuple[float, float, float]:
    """The median of the pairs' nnbench/independent ratios and its 95% bootstrap interval (pairs
    resampled whole, so each keeps the host state its two timings shared)."""
    r = np.array([a / b for a, b in pairs])
    rng = np.random.default_rng(0)
    boot = np.median(r[rng.integers(0, r.size, (draws, r.size))], axis=1)
    return float(np.median(r)), float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))


def main(out: Path, rounds: int = 5) -> int:
    out.mkdir(parents=True, exist_ok=True)
    gemm = nnbench_rows(out, ["gemm", "--size", "4096", "-v", "naive"], "gemm")
    ours = _float(gemm.get("cublas", {}).get("median_ms"))
    rows = [summary("cuBLAS SGEMM 4096^3 (ms)", [ours], [cublas_sgemm(4096)])]
    pairs = []
    for i in range(rounds):  # each round's pairs written as they come: a cut-off run keeps its rounds
        got = one_round(i, out)
        with open(out / "rounds.csv", "a" if pairs else "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(got[0]))
            if not pairs:
                w.writeheader()
            w.writerows(got)
        pairs += got
    for key in dict.fromkeys(p["baseline"] for p in pairs):
        got = [p for p in pairs if p["baseline"] == key]
        rows.append(summary(key, [p["nnbench"] for p in got], [p["independent"] for p in got]))
    print(f"{'baseline':44} {'nnbench':>9} {'independent':>11} {'diff':>7} {'rounds: min..max diff':>22}")
    for r in rows:
        print(f"{r['baseline']:44} {r['nnbench']:9.4f} {r['independent']:11.4f} {r['difference_pct']:+6.1f}% "
              f"{r['round_difference_min_pct']:+10.1f}%..{r['round_difference_max_pct']:+.1f}%")
    with open(out / "independent_baselines.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    ratio = summarise_pairs(out)
    return 0 if agreed(rows, ratio) else 1


def summarise_pairs(out: Path) -> float | None:
    """Every eager pair of the run (its rounds' and any --eager-pairs run's): the median
    nnbench/independent ratio, printed and written with its interval; None without pairs."""
    eager = read_pairs(out / "eager_pairs.csv")
    if not eager:
        return None
    ratio, low, high = paired_ratio(eager)
    print(f"eager, all {len(eager)} interleaved pairs: nnbench/independent median {ratio:.4f} "
          f"(95% bootstrap interval {low:.4f}-{high:.4f})")
    (out / "eager_pairs_summary.json").write_text(json.dumps(dict(pairs=len(eager), median_ratio=ratio,
                                                                  ci95=[low, high])))
    return ratio


def agreed(rows: list[dict], eager_ratio: float | None, limit_pct: float = 3.0) -> bool:
    """Every row within limit_pct of its independent timing. The eager step is judged by its interleaved
    pairs alone: it wanders by tens of % within a second on the lent machine (eager_pairs.csv), so its
    medians over rounds, timed seconds apart, say where the host was, not whose timer is right; with no
    pairs the eager rows are judged as the others are."""
    judged = [r for r in rows if eager_ratio is None or not r["baseline"].startswith("torch-eager")]
    pairs_ok = eager_ratio is None or abs(100 * (eager_ratio - 1)) <= limit_pct
    return pairs_ok and all(abs(r["difference_pct"]) <= limit_pct for r in judged)


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__[__doc__.index("Usage:"):].strip())
        sys.exit(0 if len(sys.argv) > 1 else 2)
    if sys.argv[1] == "--conv":
        print(json.dumps(cudnn_rows()))
        sys.exit(0)
    if sys.argv[1] == "--train":
        result = train_round(sys.argv[2])
        print(json.dumps(result))
        sys.exit(0)
    if sys.argv[1] == "--eager-pairs":  # N OUTDIR: N more pairs in one fresh process, added to OUTDIR's
        Path(sys.argv[3]).mkdir(parents=True, exist_ok=True)
        write_pairs(Path(sys.argv[3]) / "eager_pairs.csv", "extra", eager_pairs(int(sys.argv[2])))
        summarise_pairs(Path(sys.argv[3]))
        sys.exit(0)
    sys.exit(main(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 5))
