#!/usr/bin/env bash
# nnbench's CUDA-event median against Nsight Compute's gpu__time_duration for every step of the GEMM
# ladder (docs/RESULTS.md, issue 8). Usage: lab/scripts/ncu_fidelity.sh OUTDIR [SIZE]
# Why a script, not the CLI: compares nnbench's medians with Nsight Compute's durations kernel by
# kernel; the CLI runs ncu for one kernel at a time.
set -uo pipefail
out=${1:?OUTDIR}; size=${2:-4096}
mkdir -p "$out"
for v in naive "tiled --ts 32" "coarsened --ts 32 --wpt 8" register_2d vectorized warptile double_buffered tf32x3; do
  name=${v%% *}
  timeout 240 python3 -m nnbench profile gemm -v $v --m "$size" --n "$size" --k "$size" --ncu > "$out/$name.txt" 2>&1 \
    || echo "$name: exit $?" >> "$out/failures.txt"
  grep -E "nnbench median vs ncu|$name" "$out/$name.txt" | tail -1
done
