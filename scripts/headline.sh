#!/usr/bin/env bash
# The headline figures of docs/RESULTS.md in one device call, each command as the page quotes it:
# the GEMM ladder at 4096^3 beside cuBLAS (FP32 and TF32), Net 8 mini-batch at B = 256 and 4096 beside
# the cuBLAS step and PyTorch, and the ResNet layers forward and backward (configs/conv_implicit.yaml) beside cuDNN (FP32 and TF32).
# Why a script, not the CLI: it is three commands whose logs and CSVs travel back together.
# Usage: scripts/headline.sh OUTDIR
set -uo pipefail
out=${1:?OUTDIR}
python3 -m nnbench gemm --size 4096 --csv "$out/gemm_4096.csv" > "$out/gemm_4096.log" 2>&1; echo "gemm: exit $?"
python3 -m nnbench train --net 8 --batch 4096 -V batched-wgmma-graph -V batched-wgmma -V batched -V batched-cublas --compare torch --no-letters \
  --csv "$out/batched_net8_b4096.csv" > "$out/batched_net8_b4096.log" 2>&1; echo "batched B=4096: exit $?"
python3 -m nnbench train --net 8 --batch 256 -V batched-wgmma-graph -V batched-wgmma -V batched -V batched-cublas --compare torch --no-letters \
  --csv "$out/batched_net8_b256.csv" > "$out/batched_net8_b256.log" 2>&1; echo "batched B=256: exit $?"
python3 -m nnbench sweep configs/conv_implicit.yaml --fresh --out "$out/conv_implicit.csv" > "$out/conv_implicit.log" 2>&1
echo "conv: exit $?"
