#!/usr/bin/env bash
# The mini-batch report of docs/RESULTS.md: for each net and batch size, our GEMMs (batched),
# cuBLAS (batched-cublas) and PyTorch eager and graph, 10 epochs of 65,536 noisy letters.
# Usage: scripts/batched_table.sh OUTDIR "NETS" "BATCHES"   e.g. scripts/batched_table.sh out "1 8" "256 4096"
set -euo pipefail
out=${1:?OUTDIR}; nets=${2:-"1 2 3 4 5 6 7 8"}; batches=${3:-"256 4096 16384"}
mkdir -p "$out"
for b in $batches; do
  for n in $nets; do
    python3 -m nnbench train --net "$n" --batch "$b" -V batched -V batched-cublas --compare torch --no-letters \
      --csv "$out/batched-net$n-b$b.csv" > "$out/batched-net$n-b$b.log" 2>&1 || echo "net $n batch $b: exit $?" >> "$out/failures.txt"
    tail -n 12 "$out/batched-net$n-b$b.log"
  done
done
