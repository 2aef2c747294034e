#!/usr/bin/env bash
# Data-parallel training with the allreduce in buckets during the backward pass, beside PyTorch DDP
# (issue 31; lab/journal/multigpu.md). Net N, batched-wgmma; weak scaling at 4096 samples per GPU,
# strong scaling at a global batch of 4096 x the largest count; each count > 1 as one allreduce after
# the backward pass (--bucket-mb 0, the path before buckets) and in buckets (--bucket-mb 2), each with
# the DDP row (--compare torch: DDP's default 25 MB buckets beside the first, 2 MB beside the second).
# Usage: lab/scripts/multigpu.sh OUTDIR "1 2" [NET]. Then: python3 lab/scripts/multigpu_table.py OUTDIR
# Environment: EXTRA_BUCKETS="1 4" adds runs at those bucket sizes (no DDP row); STOP_ON_FAIL=1 stops
# at the first failed run (on a lent machine: a broken build costs no more); RUN_TIMEOUT (s, default 150).
# Why a script, not the CLI: the GPU count is not a sweep axis (each count is its own set of MPI ranks).
set -uo pipefail
out=${1:?OUTDIR}; counts=${2:-"1 2"}; net=${3:-8}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # multicast stays off (device docs)
top=$(echo $counts | tr ' ' '\n' | sort -n | tail -1)
run() {  # name, batch, gpus, bucket_mb, extra args...
  local name=$1 batch=$2 gpus=$3 mb=$4; shift 4
  local args=(train --net "$net" --batch "$batch" -V batched-wgmma --epochs 1 --train-samples 65536 --no-letters
              --csv "$out/$name.csv" "$@")
  if [ "$gpus" -gt 1 ]; then args+=(--gpus "$gpus" --allreduce nccl --bucket-mb "$mb"); fi
  echo "$(date -u +%T) $name: nnbench ${args[*]}" >> "$out/commands.txt"
  timeout "${RUN_TIMEOUT:-150}" python3 -m nnbench "${args[@]}" > "$out/$name.log" 2>&1 \
    || { echo "$name: exit $?" >> "$out/failures.txt"; [ "${STOP_ON_FAIL:-0}" = 1 ] && exit 1; }
}
for n in $counts; do
  if [ "$n" -eq 1 ]; then
    run "1gpu-b4096" 4096 1 0 --compare torch
    [ "$top" -gt 1 ] && run "1gpu-b$((4096 * top))" $((4096 * top)) 1 0
    continue
  fi
  run "${n}gpu-b$((4096 * n))-one" $((4096 * n)) "$n" 0 --compare torch
  run "${n}gpu-b$((4096 * n))-buckets2" $((4096 * n)) "$n" 2 --compare torch
  for mb in ${EXTRA_BUCKETS:-}; do run "${n}gpu-b$((4096 * n))-buckets$mb" $((4096 * n)) "$n" "$mb"; done
  if [ "$n" -ne "$top" ]; then  # strong scaling at the largest count's global batch
    run "${n}gpu-b$((4096 * top))-one" $((4096 * top)) "$n" 0
    run "${n}gpu-b$((4096 * top))-buckets2" $((4096 * top)) "$n" 2
  fi
done
