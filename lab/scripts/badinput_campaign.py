#!/usr/bin/env python3
"""A bad-input campaign on the CPU path: every command, as a user would run it (a subprocess each),
with inputs that must be refused. Counts what issue 26 counted:

  traceback   "Traceback" on stderr
  silent      exit 0 (or 1) where the input should have been refused
  exit code   any other wrong exit code: a crash, a signal, a hang (killed after --timeout s)
  noisy       exit 2 but not exactly one `nnbench: error:` line on stderr (stdout may carry what the
              command printed before it found the problem, such as a sweep's plan)
  data loss   a file that existed before the command (a result CSV, a baseline) changed, or a
              file appeared in the repository's results/

Usage: python lab/scripts/badinput_campaign.py [--jobs 3] [--timeout 60] [--show]
Exit code 0 when every input got exactly what it should; 1 otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "results" / "baselines" / "nvidia-h100-80gb-hbm3.csv"
CPU = ["--backend", "cpu"]


@dataclass
class Case:
    args: list[str]
    expect: int = 2  # 1: a gate that must fail (bad data, not bad usage)
    env: dict = field(default_factory=dict)
    files: dict = field(default_factory=dict)  # name -> bytes, made in the case's folder first
    label: str = ""


def sweep_yaml(body: str, head: str = "name: c\nsuite: gemm\nshapes: [[9, 8, 7]]\n") -> bytes:
    return (head + body).encode()


def coarsened(restrict: str) -> bytes:
    return sweep_yaml(
        f"variants:\n  coarsened:\n    axes: {{ts: [16, 32], wpt: [1, 2]}}\n    restrict:\n      - {restrict}\n"
    )


def csv_rows(*rows: str) -> bytes:
    head = BASELINE.read_text().splitlines()[0]
    return ("\n".join([head, *rows]) + "\n").encode()


def base_row(median: str = "1.0", status: str = "PASS", variant: str = "naive") -> str:
    fields = BASELINE.read_text().splitlines()[0].split(",")
    vals = {
        "suite": "gemm",
        "variant": variant,
        "shape": "64×64×64",
        "cold": "False",
        "median_ms": median,
        "iqr_ms": "0.01",
        "status": status,
        "gpu": "G",
        "rtol": "5e-05",
        "rel_err": "1e-07",
    }
    return ",".join(vals.get(f, "") for f in fields)


def cases() -> list[Case]:
    out: list[Case] = []
    bad_numbers = ["nan", "inf", "-inf", "-1", "", "abc", "1e999"]
    numeric = {
        "gemm": (["gemm", *CPU, "--size", "8"], ["--budget", "--rtol", "--seed"]),
        "gemm-shape": (["gemm", *CPU], ["--size"]),
        "gemm-mnk": (["gemm", *CPU, "--n", "8", "--k", "8"], ["--m"]),
        "gemm-params": (["gemm", *CPU, "-v", "numpy"], ["--ts"]),
        "train": (
            ["train", *CPU, "--net", "1", "--max-iterations", "104"],
            ["--rate", "--momentum", "--tolerance", "--init-scale", "--seed", "--encoding", "--test-per-letter"],
        ),
        "train-iter": (["train", *CPU, "--net", "1"], ["--max-iterations"]),
        "train-batch": (
            ["train", *CPU, "--net", "1", "--batch", "64", "--epochs", "1", "--train-samples", "64"],
            ["--gpus"],
        ),
        "train-b": (["train", *CPU, "--net", "1"], ["--batch"]),
        "conv": (
            ["conv", *CPU, "--n", "1", "--c", "1", "--h", "5", "--w", "5", "--k", "1", "--r", "3"],
            ["--stride", "--pad", "--seed", "--budget"],
        ),
        "conv-n": (["conv", *CPU, "--c", "1", "--h", "5", "--w", "5", "--k", "1", "--r", "3"], ["--n"]),
        "sweep": (["sweep", "configs/ci.yaml", *CPU, "--dry-run"], ["--watchdog", "--jobs"]),
        "check": (["check", str(BASELINE), str(BASELINE)], ["--tolerance"]),
        "profile": (["profile", "gemm", "-v", "numpy", *CPU], ["--m"]),
    }
    for name, (prefix, opts) in numeric.items():
        for opt in opts:
            for v in bad_numbers:
                if opt == "--pad" and v == "":
                    continue
                out.append(Case([*prefix, opt, v], label=f"{name} {opt} {v!r}"))
    names = [
        ["train", *CPU, "--net", ""],
        ["train", *CPU, "--net", " "],
        ["train", *CPU, "--net", "9"],
        ["train", *CPU, "--layers", ""],
        ["train", *CPU, "--layers", ","],
        ["train", *CPU, "--layers", "60,,7"],
        ["train", *CPU, "--layers", "60,-5,7"],
        ["train", *CPU, "--layers", "60,100000000,7"],
        ["train", *CPU, "--layers", "60,1e9,7"],
        ["train", *CPU, "--net", "1", "-v", ""],
        ["train", *CPU, "--net", "1", "--init", ""],
        ["gemm", *CPU, "-v", ""],
        ["gemm", *CPU, "-v", "tf32x3"],
        ["conv", *CPU, "-p", ""],
        ["conv", *CPU, "--set", ""],
        ["conv", *CPU, "--model", "vgg"],
        ["profile", "", "-v", "numpy", *CPU],
        ["profile", "gemm", "-v", "", *CPU],
        ["profile", "mlp", "-v", "batched", "--net", "", *CPU],
        ["profile", "gemm", "-v", "tiled", "--arch", "sm_", *CPU],
        ["sweep", "configs/ci.yaml", "--compile-only", "--arch", "sm_"],
        ["sweep", "configs/ci.yaml", "--arch", "sm_90"],
        ["gemm", *CPU, "--size", "30000"],
        ["gemm", *CPU, "--size", "65536"],
        ["gemm", *CPU, "--m", "8"],
        ["gemm", *CPU, "--size", "8", "--m", "8", "--n", "8", "--k", "8"],
        ["conv", *CPU, "--n", "8", "--c", "512", "--h", "256", "--w", "256", "--k", "512", "--r", "3"],
        ["conv", *CPU, "--n", "1", "--c", "1", "--h", "2", "--w", "2", "--k", "1", "--r", "3"],
        ["sweep", "configs/ci.yaml", "--dry-run", "--compile-only"],
        ["train", *CPU, "--net", "1", "--layers", "60,7"],
        ["train", *CPU, "--net", "1", "--epochs", "2"],
        ["check", str(BASELINE)],
        ["check"],
        ["report"],
        ["nosuch"],
        ["gemm", "--backend", "tpu"],
        ["devices", "--bogus"],
    ]
    out += [Case(a, label=" ".join(a)) for a in names]

    # Result files: existing ones are never touched; unwritable places are one line.
    base = BASELINE.read_bytes()
    writers = {
        "gemm": ["gemm", *CPU, "--size", "8", "--budget", "0.01"],
        "train": ["train", *CPU, "--net", "1", "--max-iterations", "104", "--test-per-letter", "1"],
        "conv": [
            "conv",
            *CPU,
            "--n",
            "1",
            "--c",
            "1",
            "--h",
            "5",
            "--w",
            "5",
            "--k",
            "1",
            "--r",
            "3",
            "--budget",
            "0.01",
        ],
    }
    for name, cmd in writers.items():
        out.append(Case([*cmd, "--csv", "{dir}/b.csv"], files={"b.csv": base}, label=f"{name} --csv existing"))
        out.append(Case([*cmd, "--csv", "/dev/full"], label=f"{name} --csv /dev/full"))
        out.append(Case([*cmd, "--csv", "/dev/full", "--force"], label=f"{name} --csv /dev/full --force"))
        out.append(Case([*cmd, "--csv", "{dir}"], label=f"{name} --csv a folder"))
        out.append(Case([*cmd, "--csv", "/sys/nnbench/x.csv"], label=f"{name} --csv read-only place"))
        out.append(Case([*cmd, "--csv", "/proc/self/x.csv"], label=f"{name} --csv /proc"))
    sweep_ok = sweep_yaml("timing: {budget: 0.01}\nvariants: {numpy: }\n")
    out += [
        Case(
            ["sweep", "{dir}/s.yaml", *CPU, "--out", "/dev/full"],
            files={"s.yaml": sweep_ok},
            label="sweep --out /dev/full",
        ),
        Case(["sweep", "{dir}/s.yaml", *CPU, "--out", "{dir}"], files={"s.yaml": sweep_ok}, label="sweep --out folder"),
        Case(
            ["sweep", "{dir}/s.yaml", *CPU, "--out", "{dir}/b.csv", "--fresh"],
            files={"s.yaml": sweep_ok, "b.csv": base},
            label="sweep --fresh over a file",
        ),
        Case(
            ["sweep", "{dir}/s.yaml", *CPU, "--out", "{dir}/o.csv"],
            files={"s.yaml": sweep_ok, "o.csv": b"a,b\n1,2\n"},
            label="sweep resume of another schema",
        ),
        Case(
            ["sweep", "{dir}/s.yaml", *CPU, "--out", "{dir}/o.csv"],
            files={"s.yaml": sweep_ok, "o.csv": b"\xff\xfe" * 50},
            label="sweep resume of a binary file",
        ),
        Case(
            ["sweep", "{dir}/s.yaml", *CPU, "--out", "/sys/nnbench/x.csv"],
            files={"s.yaml": sweep_ok},
            label="sweep --out read-only place",
        ),
        Case(
            ["sweep", "configs/ci.yaml", "--compile-only", "--arch", "sm_90"],
            env={"NNBENCH_CACHE": "{dir}/f"},
            files={"f": b"a file"},
            label="NNBENCH_CACHE is a file",
        ),
        Case(
            ["sweep", "configs/ci.yaml", "--compile-only", "--arch", "sm_90"],
            env={"NNBENCH_CACHE": "/sys/nnbench"},
            label="NNBENCH_CACHE read-only",
        ),
    ]
    # check and report on bad files
    bad_files = {
        "empty.csv": b"",
        "bin.csv": bytes(range(256)) * 4,
        "junk.csv": b"a,b\n1,2\n",
        "nonutf8.csv": b"suite,variant\n\xff\xfe,\x80\n",
    }
    for name, data in bad_files.items():
        out.append(Case(["check", str(BASELINE), f"{{dir}}/{name}"], files={name: data}, label=f"check {name}"))
        out.append(
            Case(
                ["report", f"{{dir}}/{name}", "--plot", "speedup", "--out", "{dir}/p.png"],
                files={name: data},
                label=f"report {name}",
            )
        )
    out += [
        Case(["check", str(BASELINE), "{dir}"], label="check a folder"),
        Case(["check", str(BASELINE), "{dir}/missing.csv"], label="check a missing file"),
        Case(["report", "{dir}", "--plot", "speedup", "--out", "{dir}/p.png"], label="report a folder"),
        Case(
            ["report", "tests/data/train_net1_h100.csv", "--plot", "speedup", "--out", "{dir}/x.txt"],
            label="report .txt",
        ),
        Case(
            ["report", "tests/data/train_net1_h100.csv", "--plot", "speedup", "--out", "/dev/full"],
            label="report /dev/full",
        ),
        Case(
            ["report", "tests/data/train_net1_h100.csv", "--plot", "speedup", "--out", "{dir}/b.png"],
            files={"b.png": b"an earlier plot"},
            label="report over an existing png",
        ),
        Case(
            ["report", "tests/data/train_net1_h100.csv", "--plot", "pie", "--out", "{dir}/p.png"],
            label="report --plot pie",
        ),
        Case(
            ["report", "{dir}/h.csv", "--plot", "speedup", "--out", "{dir}/p.png"],
            files={"h.csv": b"status,speedup\n"},
            label="report header only",
        ),
        Case(
            ["report", "{dir}/f.csv", "--plot", "speedup", "--out", "{dir}/p.png"],
            files={"f.csv": b"status,version,speedup_vs_sequential\nFAIL,kcm,3\n"},
            label="report no verified rows",
        ),
    ]
    # bad data that must fail the gate (exit 1), never pass it or crash
    gate = {
        "nan baseline": ([base_row("nan")], [base_row("1.0")]),
        "zero baseline": ([base_row("0")], [base_row("1.0")]),
        "inf baseline": ([base_row("inf")], [base_row("1.0")]),
        "text current": ([base_row("1.0")], [base_row("fast")]),
        "nan current": ([base_row("1.0")], [base_row("nan")]),
        "empty current": ([base_row("1.0")], []),
        "error current": ([base_row("1.0")], [base_row("1.0", "ERROR")]),
        "error baseline": ([base_row("1.0", "ERROR")], [base_row("1.0")]),
    }
    for name, (b, c) in gate.items():
        out.append(
            Case(
                ["check", "{dir}/b.csv", "{dir}/c.csv"],
                expect=1,
                files={"b.csv": csv_rows(*b), "c.csv": csv_rows(*c)},
                label=f"gate: {name}",
            )
        )
    # YAML
    yamls = {
        "pow tower": coarsened("'(((((ts ** 64) ** 64) ** 64) ** 64) ** 64) > 0'"),
        "100k sum": coarsened("'" + "+".join(["ts"] * 100_000) + " > 0'"),
        "50k minus": coarsened("'" + "-" * 50_000 + "ts > 0'"),
        "log2(0)": coarsened("log2(ts - ts) > 1"),
        "cdiv by 0": coarsened("cdiv(ts, wpt - wpt) > 1"),
        "min()": coarsened("min() > 1"),
        "tuple compare": coarsened("(1, 2) < 3"),
        "restrict 5": coarsened("5"),
        "restrict ts+1": coarsened("ts + 1"),
        "import": coarsened("__import__('os').system('true')"),
        "attribute": coarsened("ts.__class__"),
        "string": coarsened('\'"a" == "a"\''),
        "unknown name": coarsened("bogus > 1"),
        "lambda": coarsened("'(lambda: 1)() > 0'"),
        "huge range": sweep_yaml("variants:\n  coarsened:\n    axes: {ts: {start: 1, stop: 1000000000000}}\n"),
        "range step 0": sweep_yaml("variants:\n  coarsened:\n    axes: {ts: {start: 1, stop: 8, step: 0}}\n"),
        "pow2 bad": sweep_yaml("variants:\n  coarsened:\n    axes: {ts: {pow2: [3, 16]}}\n"),
        "non-utf8": b"name: t\xff\xfe\n",
        "binary": bytes(range(256)),
        "empty": b"",
        "list top": b"- 1\n- 2\n",
        "deep": ("a: " + "[" * 5000 + "]" * 5000 + "\n").encode(),
        "tab": b"name:\tc\n\tsuite: gemm\n",
        "duplicate key": sweep_yaml("variants: {numpy: }\nvariants: {numpy: }\n"),
        "unknown suite": b"suite: nope\nshapes: [[1, 1, 1]]\nvariants: {numpy: }\n",
        "nan budget": sweep_yaml("timing: {budget: .nan}\nvariants: {numpy: }\n"),
        "inf budget": sweep_yaml("timing: {budget: .inf}\nvariants: {numpy: }\n"),
        "text inf budget": sweep_yaml("timing: {budget: inf}\nvariants: {numpy: }\n"),
        "negative seed": sweep_yaml("seed: -1\nvariants: {numpy: }\n"),
        "zero shape": sweep_yaml("variants: {numpy: }\n", "name: c\nsuite: gemm\nshapes: [[0, 8, 7]]\n"),
        "huge shape": sweep_yaml("variants: {numpy: }\n", "name: c\nsuite: gemm\nshapes: [[100000, 100000, 7]]\n"),
        "octal int": sweep_yaml("variants: {numpy: }\n", "name: c\nsuite: gemm\nshapes: [[09, 8, 7]]\n"),
        "sexagesimal": sweep_yaml("variants: {numpy: }\n", "name: c\nsuite: gemm\nshapes: [[1:30, 8, 7]]\n"),
        "5000 digits": sweep_yaml(
            "variants: {numpy: }\n", "name: c\nsuite: gemm\nshapes: [[" + "9" * 5000 + ", 8, 7]]\n"
        ),
        "bad name": sweep_yaml("variants: {numpy: }\n", "name: ../../etc\nsuite: gemm\nshapes: [[9, 8, 7]]\n"),
        "alias bomb": sweep_yaml(
            "variants: {numpy: }\n", "name: c\nsuite: gemm\na: &a [1, 1, 1]\nb: &b [*a, *a, *a]\nshapes: [[9, 8, 7]]\n"
        ),
    }
    for name, data in yamls.items():
        out.append(Case(["sweep", "{dir}/c.yaml", "--dry-run"], files={"c.yaml": data}, label=f"yaml: {name}"))
    return out


@dataclass
class Outcome:
    case: Case
    rc: int
    stdout: str
    stderr: str
    seconds: float
    kinds: list[str]


def run_case(case: Case, timeout: float, repo_results_before: dict) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="nnbench-bad-") as d:
        folder = Path(d)
        for name, data in case.files.items():
            (folder / name).write_bytes(data)
        protected = {p: hashlib.sha1(p.read_bytes()).hexdigest() for p in folder.iterdir() if p.is_file()}
        args = [a.replace("{dir}", d) for a in case.args]
        env = dict(os.environ, PYTHONPATH=str(ROOT), **{k: v.replace("{dir}", d) for k, v in case.env.items()})
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "nnbench", *args],
                capture_output=True,
                text=True,
                timeout=timeout,
                cwd=ROOT,
                env=env,
                errors="replace",
            )
            rc, so, se = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as e:
            rc, so, se = -999, str(e.stdout or ""), str(e.stderr or "")
        seconds = time.perf_counter() - t0
        changed = [p for p, h in protected.items() if not p.exists() or hashlib.sha1(p.read_bytes()).hexdigest() != h]
    kinds = []
    if "Traceback" in se or "Traceback" in so:
        kinds.append("traceback")
    if rc == -999:
        kinds.append("exit code (hang)")
    elif rc != case.expect:
        kinds.append("silent" if rc in (0, 1) and case.expect == 2 or rc == 0 else "exit code")
    elif case.expect == 2:
        lines = [ln for ln in se.splitlines() if ln.strip()]
        if len(lines) != 1 or not lines[0].startswith("nnbench: error:"):
            kinds.append("noisy")
    if changed:
        kinds.append("data loss")
    return Outcome(case, rc, so, se, seconds, kinds)


def snapshot(folder: Path) -> dict:
    return {str(p): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--show", action="store_true", help="Print every case's stderr line.")
    opts = ap.parse_args()
    todo = cases()
    before = snapshot(ROOT / "results")
    t0 = time.perf_counter()
    with ThreadPoolExecutor(opts.jobs) as pool:
        done = list(pool.map(lambda c: run_case(c, opts.timeout, before), todo))
    after = snapshot(ROOT / "results")
    counts = {k: 0 for k in ("traceback", "silent", "exit code", "noisy", "data loss")}
    for o in done:
        for k in o.kinds:
            counts["exit code" if k.startswith("exit code") else k] += 1
        if o.kinds or opts.show:
            tail = (o.stderr.strip().splitlines() or [""])[-1][:200]
            print(
                f"{'BAD ' + ','.join(o.kinds) if o.kinds else 'ok':<28} rc={o.rc:<4} {o.case.label[:70]:<70} | {tail}"
            )
    stray = sorted(set(after) - set(before)) + sorted(p for p in before if p in after and after[p] != before[p])
    if stray:
        counts["data loss"] += len(stray)
        print("files changed or created under results/:", *stray, sep="\n  ")
    clean = sum(not o.kinds for o in done)
    print(
        f"\n{len(done)} bad inputs in {time.perf_counter() - t0:.0f} s: {clean} clean (expected exit code, one line, "
        f"no traceback, no file changed); " + ", ".join(f"{v} {k}" for k, v in counts.items())
    )
    slow = sorted(done, key=lambda o: -o.seconds)[:3]
    print("slowest:", "; ".join(f"{o.case.label[:50]} {o.seconds:.1f} s" for o in slow))
    return 0 if clean == len(done) and not stray else 1


if __name__ == "__main__":
    sys.exit(main())
