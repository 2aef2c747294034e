#!/bin/bash
# issue 30, helper scale2: one device call. The helper-kernel test, the same test with the prime call
# planted out (must fail), then the overhead script (cold plain run + 3 alternating pairs).
cd "$(dirname "$0")/.."
R=$OUT/scale2; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv > $R/gpu.txt 2>&1
python3 -m pytest -q -p no:cacheprovider tests/test_gpu_sweep.py -k helper_kernels > $R/tests.log 2>&1; echo "rc=$?" >> $R/tests.log
rm -rf /tmp/planted && mkdir /tmp/planted && cp -r nnbench kernels_cu tests configs pyproject.toml /tmp/planted/
sed -i 's/        backend.prime()/        pass  # planted: no prime/' /tmp/planted/nnbench/sweeps/worker.py
grep -n "planted: no prime" /tmp/planted/nnbench/sweeps/worker.py >> $R/tests.log
(cd /tmp/planted && PYTHONPATH=/tmp/nnbench-gpu-site:/tmp/planted python3 -m pytest -q -p no:cacheprovider tests/test_gpu_sweep.py -k helper_kernels 2>&1 | tail -15; echo "planted rc=${PIPESTATUS[0]}") >> $R/tests.log 2>&1
python3 lab/scripts/sweep_overhead.py --out-dir $R/step4 --pairs 3 > $R/overhead.log 2>&1; echo "rc=$?" >> $R/overhead.log
tar -czf $OUT/step4_csvs.tgz -C $R step4 && rm -rf $R/step4/*.csv
cp $R/step4/overhead.json $R/ 2>/dev/null
tail -20 $R/tests.log; cat $R/overhead.log
