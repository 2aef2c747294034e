"""Time the vendor baselines with code that shares nothing with nnbench's harness, and compare with
nnbench's own rows from the same run (issue 25: every baseline row within 3% of an independent timing).

Independent means: plain CuPy and PyTorch, their own buffers, their own warm-up (10 calls), and the
median of 50 samples, each sample CUDA events around 20 back-to-back calls issued from Python. The
nnbench rows come from `nnbench gemm`, `nnbench conv` and `nnbench train` run as commands.

PyTorch eager is host time (Python issuing ~400 kernels a step, the GPU waiting on them), so it moves
with the host's state: by 10% between runs of the same code minutes apart. Its two timings are therefore
taken in interleaved rounds (nnbench's command, then the independent step, ROUNDS times), so that both
see the same host, and compared as the median over rounds; each round's pair is written too.

Why a script, not the CLI: it is the check of the CLI's baselines, so it must not use the CLI's code.
Usage: python3 scripts/independent_baselines.py OUTDIR [ROUNDS]   (GPU, PyTorch and CuPy; ROUNDS 5)
"""

from __future__ import annotations

import csv
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np


def events_median_ms(fn, calls: int = 20, samples: int = 50, warmup: int = 10) -> float:
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(samples):
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


def cudnn_conv(tf32: bool) -> float:
    import torch
    import torch.nn.functional as F
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = tf32
    x = torch.randn(32, 64, 56, 56, device="cuda")
    w = torch.randn(64, 64, 3, 3, device="cuda")
    return events_median_ms(lambda: F.conv2d(x, w, padding=1))


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
        return events_median_ms(step, calls=5, samples=30)
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


def nnbench_rows(out: Path, args: list[str], name: str) -> list[dict]:
    path = out / f"{name}.csv"
    subprocess.run([sys.executable, "-m", "nnbench", *args, "--csv", str(path)], check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(path) as f:
        return list(csv.DictReader(f))


NET8 = (120, *[500] * 13, 100, 7)
TORCH_ARGS = ["train", "--net", "8", "--batch", "4096", "-V", "batched-cublas", "--compare", "torch", "--epochs", "6",
              "--no-letters"]


def torch_rounds(out: Path, rounds: int) -> dict[str, tuple[float, float]]:
    """(nnbench, independent) medians over interleaved rounds for the two PyTorch rows; every round's
    pair goes to torch_rounds.csv."""
    pairs: dict[str, list[tuple[float, float]]] = {}
    for i in range(rounds):
        ours = {f"{r['variant']} Net 8 B=4096 step (ms)": float(r["median_ms"])
                for r in nnbench_rows(out, TORCH_ARGS, f"train_round{i}") if r["variant"].startswith("torch")}
        for graph in (False, True):
            key = f"torch-{'graph' if graph else 'eager'} Net 8 B=4096 step (ms)"
            theirs = torch_step(NET8, 4096, graph)
            pairs.setdefault(key, []).append((ours.get(key, float("nan")), theirs))
            print(f"round {i}: {key:40} nnbench {ours.get(key, float('nan')):.4f} independent {theirs:.4f}",
                  flush=True)
    with open(out / "torch_rounds.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["baseline", "round", "nnbench", "independent"])
        for key, got in pairs.items():
            w.writerows([key, i, a, b] for i, (a, b) in enumerate(got))
    return {k: (statistics.median(a for a, _ in v), statistics.median(b for _, b in v)) for k, v in pairs.items()}


def main(out: Path, rounds: int = 5) -> int:
    out.mkdir(parents=True, exist_ok=True)
    ours = {}
    for r in nnbench_rows(out, ["gemm", "--size", "4096", "-v", "naive"], "gemm"):
        if r["variant"] == "cublas":
            ours["cuBLAS SGEMM 4096^3 (ms)"] = float(r["median_ms"])
    for r in nnbench_rows(out, ["conv", "--n", "32", "--c", "64", "--h", "56", "--w", "56", "--k", "64", "--r", "3",
                                "--pad", "1", "-p", "direct"], "conv"):
        if r["variant"] in ("cudnn", "cudnn-tf32"):
            ours[f"{r['variant']} N32 C64 56^2 K64 3x3 (ms)"] = float(r["median_ms"])
    theirs = {
        "cuBLAS SGEMM 4096^3 (ms)": cublas_sgemm(4096),
        "cudnn N32 C64 56^2 K64 3x3 (ms)": cudnn_conv(False),
        "cudnn-tf32 N32 C64 56^2 K64 3x3 (ms)": cudnn_conv(True),
    }
    for key, (mine, indep) in torch_rounds(out, rounds).items():
        ours[key], theirs[key] = mine, indep
    rows = []
    print(f"{'baseline':40} {'nnbench':>10} {'independent':>12} {'difference':>11}")
    for k, v in theirs.items():
        mine = ours.get(k)
        diff = 100 * (mine / v - 1) if mine else float("nan")
        rows.append({"baseline": k, "nnbench": mine, "independent": v, "difference_pct": diff})
        print(f"{k:40} {mine if mine else float('nan'):10.4f} {v:12.4f} {diff:+10.1f}%")
    with open(out / "independent_baselines.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 5))
