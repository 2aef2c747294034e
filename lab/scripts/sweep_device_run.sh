#!/bin/bash
# issue 30: one device call of the overhead script's A/A pairs (`--gpus 1` against a plain sweep), in the
# mirrored order (--lead plain: p g, g p, p g, ...). Session 6 (helper scale4): the cold run is replaced by
# a compile into the empty cache (COLD=compile) and the pairs stop at MAX_S seconds, so that the whole
# call fits a device allocation; COLD=run keeps session 5's measured cold run (the overhead figure).
cd "$(dirname "$0")/.."
R=$OUT/run; mkdir -p $R
q=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw,persistence_mode
{ date -u +%FT%TZ; nvidia-smi --query-gpu=$q --format=csv; nproc; } > $R/gpu.txt 2>&1
cold=(); [ "${COLD:-compile}" = compile ] && cold=(--compile-first sm_90)
python3 lab/scripts/sweep_overhead.py --out-dir $R/step4 --pairs "${PAIRS:-4}" --lead "${LEAD:-plain}" "${cold[@]}" \
  ${MAX_S:+--max-seconds $MAX_S} > $R/overhead.log 2>&1
echo "rc=$?" >> $R/overhead.log
{ date -u +%FT%TZ; nvidia-smi --query-gpu=$q --format=csv,noheader; } >> $R/gpu.txt 2>&1
cp $R/step4/overhead.json $R/ 2>/dev/null
tar -czf $OUT/step4_csvs.tgz -C $R step4 && rm -rf $R/step4
cat $R/overhead.log
