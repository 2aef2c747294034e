#!/usr/bin/env bash
# The gate's false-alarm and planted-slowdown targets on the lent GPU, as CI runs the gate: every run a fresh
# process of the CLI (`nnbench sweep CONFIG --fresh`), its CSV with raw samples kept; the verdicts are computed
# afterwards on any machine by lab/scripts/measurement_gate.py (lab/journal/measurement.md).
#   bash lab/scripts/measurement_gate.sh OUT_DIR SECONDS [PLANT_N]     (from the tree's root, after .gpu/setup.sh)
# 1. compile every kernel once (clean and planted), so no run below waits for nvcc;
# 2. the planted slowdown: lab/configs/ci_plant.yaml (ci.yaml's direct convolution at the ResNet layer) 10 times clean
#    and 20 times with PLANT_SLOWDOWN=N compiled in, interleaved (clean, planted, planted);
# 3. back-to-back runs of configs/ci.yaml, a pair at a time, while the time left holds a pair.
# The pairs can be spread over several device calls (each at most 600 s):
#   GATE_FIRST_RUN=20   number this call's ci.yaml runs from 20 (run-20.csv, ...); default 0
#   GATE_PAIRS=10       at most this many pairs in this call; default: while the time holds a pair
#   GATE_PLANT=last     the planted rounds after the pairs, while the time holds a round (of 3 runs); `none` skips
#                       them; default `first`
set -u
out=$1
total=${2:-540}
plant=${3:-211}
first=${GATE_FIRST_RUN:-0}
max_pairs=${GATE_PAIRS:-1000}
order=${GATE_PLANT:-first}
t0=$(date +%s)
left() { echo $(( total - ($(date +%s) - t0) )); }
mkdir -p "$out/plant" "$out/pairs"
export NNBENCH_CACHE=${NNBENCH_CACHE:-/tmp/nncache-gate}
nvidia-smi --query-gpu=name,uuid,serial,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > "$out/gpu.txt"
date -u >> "$out/gpu.txt"
sweep() {  # sweep CONFIG OUT.csv [plant]: one fresh run; its "ran N cases in" lines and wall time to the log
  local s=$(date +%s%N)
  if [ -n "${3:-}" ]; then NNBENCH_PLANT="PLANT_SLOWDOWN=$3" python3 -m nnbench sweep "$1" --fresh --out "$2" > /tmp/sweep.log 2>&1
  else python3 -m nnbench sweep "$1" --fresh --out "$2" > /tmp/sweep.log 2>&1; fi
  local rc=$?
  echo "$(basename "$2") rc=$rc wall=$(( ($(date +%s%N) - s) / 1000000 )) ms · $(grep -a '^ran ' /tmp/sweep.log | tr '\n' ' ')" >> "$out/runs.log"
}
python3 -m nnbench sweep configs/ci.yaml --compile-only > "$out/compile.log" 2>&1
[ "$order" = none ] || NNBENCH_PLANT="PLANT_SLOWDOWN=$plant" python3 -m nnbench sweep lab/configs/ci_plant.yaml --compile-only \
  >> "$out/compile.log" 2>&1
echo "compiled at $(( $(date +%s) - t0 )) s" >> "$out/runs.log"
planted() {  # the 10 rounds (clean, planted, planted); after the pairs, only while the time holds a round
  local i
  for i in $(seq 0 9); do
    if [ "$order" = last ] && [ "$(left)" -lt 15 ]; then break; fi
    sweep lab/configs/ci_plant.yaml "$out/plant/clean-$i.csv"
    sweep lab/configs/ci_plant.yaml "$out/plant/plant-$((2 * i)).csv" "$plant"
    sweep lab/configs/ci_plant.yaml "$out/plant/plant-$((2 * i + 1)).csv" "$plant"
  done
  echo "planted done at $(( $(date +%s) - t0 )) s" >> "$out/runs.log"
}
pairs() {
  local r=$first per=40 n=0
  while [ "$(left)" -gt $(( 2 * per + 5 )) ] && [ "$n" -lt "$max_pairs" ]; do
    local s=$(date +%s)
    sweep configs/ci.yaml "$out/pairs/run-$(printf %02d $r).csv"
    sweep configs/ci.yaml "$out/pairs/run-$(printf %02d $((r + 1))).csv"
    per=$(( ($(date +%s) - s + 1) / 2 ))
    r=$(( r + 2 ))
    n=$(( n + 1 ))
  done
  echo "pairs: $n (runs $first-$((r - 1))) at $(( $(date +%s) - t0 )) s" >> "$out/runs.log"
}
case $order in
  first) planted; pairs ;;
  last) pairs; planted ;;
  none) pairs ;;
  *) echo "GATE_PLANT=$order: choose first, last or none" >&2; exit 2 ;;
esac
