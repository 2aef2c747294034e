# session 7, final call: the GPU tests and the gate as CI runs it, at a clean commit
set -u
source .s7/env.sh
o=$OUT/final; mkdir -p $o
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,temperature.gpu,power.draw --format=csv > $o/gpu.txt; date -u >> $o/gpu.txt
t0=$(date +%s)
python3 -m pytest -m gpu -q -p no:cacheprovider > $o/pytest_gpu.log 2>&1; echo "pytest -m gpu rc=$? $(( $(date +%s)-t0 )) s" >> $o/runs.log
for i in 1 2 3; do s=$(date +%s); python3 -m nnbench check --run configs/ci.yaml --out $o/check-$i.csv --format markdown > $o/check-$i.md 2>&1; echo "check $i rc=$? $(( $(date +%s)-s )) s" >> $o/runs.log; done
date -u >> $o/gpu.txt
cat $o/runs.log; tail -3 $o/pytest_gpu.log
