#!/usr/bin/env bash
# The per-sample training table of docs/RESULTS.md: Nets 1-8 x every version, plus PyTorch eager
# and CUDA graph, for a fixed number of iterations (the time per iteration is what is compared;
# convergence is run separately with `nnbench train --net N`). Usage: scripts/train_table.sh OUTDIR
set -euo pipefail
out=${1:-results}
iters=${ITERATIONS:-1040}
for n in 1 2 3 4 5 6 7 8; do
  python3 -m nnbench train --net "$n" -V all --max-iterations "$iters" --compare torch \
      --torch-iterations "$iters" --no-letters --csv "$out/train_net$n.csv"
done
