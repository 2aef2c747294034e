#!/usr/bin/env bash
# Data-parallel scaling of mini-batch training (docs/RESULTS.md, issue 7): Net 8, `batched`,
# 1, 2 and 4 GPUs, both gradient exchanges; weak scaling at 4096 samples per GPU, strong scaling
# at a global batch of 16384. Usage: lab/scripts/scaling.sh OUTDIR "1 2 4" [NET]
# Why a script, not the CLI: runs data-parallel training over 1, 2 and 4 GPUs (--gpus, MPI ranks):
# the GPU count is not a sweep axis.
set -euo pipefail
out=${1:?OUTDIR}; counts=${2:-"1 2 4"}; net=${3:-8}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0  # NVLink SHARP multicast stays off on the lent machines (device README)
run() {  # name, batch, gpus, exchange
  local args=(train --net "$net" --batch "$2" -V batched --epochs 1 --train-samples 65536 --no-letters
              --csv "$out/$1.csv")
  if [ "$3" -gt 1 ]; then args+=(--gpus "$3" --allreduce "$4"); fi
  timeout 180 python3 -m nnbench "${args[@]}" > "$out/$1.log" 2>&1 || echo "$1: exit $?" >> "$out/failures.txt"
}
for n in $counts; do
  for ex in nccl mpi; do
    [ "$n" -eq 1 ] && [ "$ex" = mpi ] && continue
    run "weak-$n-$ex" $((4096 * n)) "$n" "$ex"
    run "strong-$n-$ex" 16384 "$n" "$ex"
  done
done
python3 - "$out" <<'PY'
import csv, glob, sys
rows = {}
for f in glob.glob(f"{sys.argv[1]}/*.csv"):
    r = next(csv.DictReader(open(f)), None)
    if r:
        rows[f.split("/")[-1][:-4]] = r
def t(name):
    return float(rows[name]["us_per_step"]) if name in rows else None
print("| scaling | GPUs | exchange | global batch | µs/step | allreduce µs | compute µs | samples/s | speedup | efficiency "
      "| check |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for kind in ("weak", "strong"):
    base = t(f"{kind}-1-nccl")
    for name in sorted(k for k in rows if k.startswith(kind)):
        r, n = rows[name], int(name.split("-")[1])
        s = float(r["us_per_step"])
        speed = base / s * (n if kind == "weak" else 1) if base else None
        eff = speed / n if speed else None
        f = lambda k, fmt: format(float(r[k]), fmt) if r.get(k) else "—"
        print(f"| {kind} | {n} | {r['exchange'] or '—'} | {int(r['batch']):,} | {s:,.1f} | {f('comm_us', ',.1f')} | "
              f"{f('compute_us', ',.1f')} | {float(r['samples_per_s']):,.0f} | "
              f"{speed:.2f}× | {100 * eff:.1f}% | {float(r['weights_rel_err']):.1e} |" if speed else "")
PY
