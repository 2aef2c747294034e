# session 7, call 1: the queue-fit fix and ci.yaml's 0.5 ms samples / 13 fused launches, checked before the pairs
set -u
source .s7/env.sh
o=$OUT/probe; mkdir -p $o
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm --format=csv > $o/gpu.txt; date -u >> $o/gpu.txt
t0=$(date +%s)
python3 -m pytest -q -p no:cacheprovider tests/test_gpu_sweep.py tests/test_measure.py -k "queue or synchron or host_delay or fills" > $o/tests.log 2>&1; echo "tests rc=$? $(( $(date +%s)-t0 )) s" >> $o/runs.log
# the planted defect: a timeout always taken for a launch that synchronizes (the queue never learned)
cp nnbench/runtime/cuda.py /tmp/cuda.keep
python3 - <<'P'
from pathlib import Path
p = Path("nnbench/runtime/cuda.py"); s = p.read_text()
s = s.replace("if count * reps > 1 and self._released(", "if False and self._released(")
p.write_text(s)
P
python3 -m pytest -q -p no:cacheprovider tests/test_gpu_sweep.py -k "many_kernels" > $o/planted.log 2>&1; echo "planted rc=$? $(( $(date +%s)-t0 )) s" >> $o/runs.log
cp /tmp/cuda.keep nnbench/runtime/cuda.py
python3 -m nnbench sweep configs/ci.yaml --compile-only > $o/compile.log 2>&1; echo "compiled $(( $(date +%s)-t0 )) s" >> $o/runs.log
for i in 0 1 2; do s=$(date +%s); python3 -m nnbench sweep configs/ci.yaml --fresh --out $o/run-$i.csv > $o/sweep-$i.log 2>&1; echo "run $i rc=$? $(( $(date +%s)-s )) s" >> $o/runs.log; done
cat $o/runs.log
