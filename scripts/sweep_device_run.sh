#!/bin/bash
# issue 30, helper scale3: one device call. The overhead script with the pairs' order mirrored
# (--lead plain: p g, g p, p g after the cold run, where sessions 3-4 ran g p, p g, g p), so that
# an effect of `--gpus 1` and an effect of the place in the series point different ways.
cd "$(dirname "$0")/.."
R=$OUT/scale3; mkdir -p $R
q=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw,persistence_mode
nvidia-smi --query-gpu=$q --format=csv > $R/gpu.txt 2>&1
nproc >> $R/gpu.txt
python3 scripts/sweep_overhead.py --out-dir $R/step4 --pairs "${PAIRS:-3}" --lead "${LEAD:-plain}" > $R/overhead.log 2>&1
echo "rc=$?" >> $R/overhead.log
nvidia-smi --query-gpu=$q --format=csv,noheader >> $R/gpu.txt 2>&1
tar -czf $OUT/step4_csvs.tgz -C $R step4 && rm -rf $R/step4/*.csv
cp $R/step4/overhead.json $R/ 2>/dev/null
cat $R/overhead.log
