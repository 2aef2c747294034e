# session 7, confirmation at the final code: the gate's GPU tests (planted slowdowns) and the gate as CI runs it
set -u
source .s7/env.sh
o=$OUT/confirm; mkdir -p $o
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,temperature.gpu,power.draw --format=csv > $o/gpu.txt; date -u >> $o/gpu.txt
t0=$(date +%s)
python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_gate.py tests/test_gpu_sweep.py tests/test_measure.py tests/test_stats_gate.py > $o/pytest.log 2>&1; echo "pytest rc=$? $(( $(date +%s)-t0 )) s" >> $o/runs.log
for i in 1 2 3 4 5; do s=$(date +%s); python3 -m nnbench check --run configs/ci.yaml --out $o/check-$i.csv --format markdown > $o/check-$i.md 2>&1; echo "check $i rc=$? $(( $(date +%s)-s )) s" >> $o/runs.log; done
date -u >> $o/gpu.txt
cat $o/runs.log; tail -1 $o/pytest.log
