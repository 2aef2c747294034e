#!/usr/bin/env bash
# What the suite contract's "done when" asks of the GPU, in one device call (lab/journal/contract.md):
# the regression gate over gemm, train and conv (a fresh baseline, then a check against it), and the
# Nets 1-8 table as a sweep that is killed part-way and resumed. Usage: lab/scripts/contract_check.sh OUTDIR
# Why a script, not the CLI: kills a sweep part-way and resumes it, which a single command cannot do
# to itself.
set -uo pipefail
out=${1:?OUTDIR}
t0=$(date +%s)
python3 -m nnbench sweep configs/ci.yaml --fresh --out "$out/ci_base.csv" > "$out/ci_base.log" 2>&1
echo "ci baseline: exit $? in $(( $(date +%s) - t0 )) s"; tail -n 4 "$out/ci_base.log"
t0=$(date +%s)
python3 -m nnbench check --run configs/ci.yaml --baseline "$out/ci_base.csv" --out "$out/ci_again.csv" \
  > "$out/ci_check.log" 2>&1
echo "ci check against it: exit $? in $(( $(date +%s) - t0 )) s"; tail -n 3 "$out/ci_check.log"
# The table sweep, its whole process killed (SIGKILL, no clean-up) after 40 s, then the same command again.
timeout -s KILL 40 python3 -m nnbench sweep configs/train_table.yaml --out "$out/train_table.csv" \
  > "$out/train_table_killed.log" 2>&1
echo "train_table killed: exit $?, rows so far: $(( $(wc -l < "$out/train_table.csv") - 1 ))"
t0=$(date +%s)
python3 -m nnbench sweep configs/train_table.yaml --out "$out/train_table.csv" > "$out/train_table.log" 2>&1
echo "train_table resumed: exit $? in $(( $(date +%s) - t0 )) s"; grep -E "resuming|ran " "$out/train_table.log"
