"""`nnbench train --gpus 1,2,4`: a scaling run. Each rank count is its own `nnbench train --gpus N` (its own
set of MPI ranks, started by mpirun as a single count is), run one after the other in this call: weak
scaling at the same per-rank batch (`--batch` B: N ranks train a global batch of N*B), and with `--strong`
or `--global-batch G`, strong scaling at one global batch (G, default B times the largest count) over every
count. The one-rank runs are the references, measured in the same call. The rows of every run, each with its
rank count and its efficiencies (nnbench/report/scaling.py), go to one CSV."""

from __future__ import annotations

import csv
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nnbench.errors import NnbenchError

# Options the scaling run sets per count (or keeps for itself): dropped from the command each count runs.
OWN = {"--gpus": True, "--ranks": True, "--batch": True, "--csv": True, "--global-batch": True, "--json": True,
       "--strong": False, "--force": False}
MULTI_RANK_ONLY = {"--allreduce": True, "--bucket-mb": True}  # refused with one rank: left out of the 1-rank runs


def plan(counts: tuple[int, ...], batch: int, global_batch: int | None) -> list[tuple[int, int]]:
    """(ranks, global batch) of every run, each once: weak at batch per rank, then strong at global_batch."""
    runs = [(n, n * batch) for n in counts]
    if global_batch is not None:
        for n in counts:
            if global_batch % n:
                raise NnbenchError(f"--global-batch {global_batch} does not split evenly over --gpus {n}: give a "
                                   f"multiple of {n}")
        runs += [(n, global_batch) for n in counts]
    return list(dict.fromkeys(runs))


def child_argv(argv: list[str], ranks: int, batch: int, csv_path: Path) -> list[str]:
    """The command line of one count's run: this command's, its own options replaced."""
    drop = dict(OWN, **(MULTI_RANK_ONLY if ranks == 1 else {}))
    out, skip = [], False
    for tok in argv:
        if skip:
            skip = False
            continue
        name = tok.split("=", 1)[0]
        if name in drop:
            skip = drop[name] and "=" not in tok
            continue
        out.append(tok)
    out += ["--batch", str(batch), "--csv", str(csv_path)]
    return out + (["--gpus", str(ranks)] if ranks > 1 else [])


def run_counts(argv: list[str], runs: list[tuple[int, int]], say) -> list[dict]:
    """Run every (ranks, global batch) as its own `nnbench` process, one at a time; their rows, in order.
    A run that fails adds no rows: its output's last lines are said, and the others go on."""
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="nnbench-scaling-") as tmp:
        for ranks, batch in runs:
            path = Path(tmp) / f"ranks{ranks}-b{batch}.csv"
            cmd = [sys.executable, "-m", "nnbench", *child_argv(argv, ranks, batch, path)]
            start = time.monotonic()
            res = subprocess.run(cmd, capture_output=True, text=True)
            took = time.monotonic() - start
            got = list(csv.DictReader(path.open())) if path.exists() else []
            say(f"{ranks} rank{'s' if ranks > 1 else ''}, global batch {batch:,}: {len(got)} rows, {took:,.1f} s"
                + ("" if res.returncode == 0 else f", exit {res.returncode}"))
            if res.returncode != 0 and not got:
                tail = (res.stdout + res.stderr).strip().splitlines()[-5:]
                say("  " + "\n  ".join(tail))
            rows += got
    return rows
