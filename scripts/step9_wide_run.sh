#!/bin/bash
# Step 9's transposed path on the lent GPU, one call (issue 27, session 5), results under $OUT:
#   MODE=check: Net 8's training GEMMs at batch 4096 against cuBLAS (scripts/step9_bench.py), then the step 9
#               GPU tests (new wide shapes, planted defects);
#   MODE=final: `nnbench sweep configs/step9.yaml` (4096^3, the CI shapes, Net 8, the odd shapes; cuBLAS
#               beside) and the step 9 GPU tests.
#   NCU=1: also ncu's sections for one launch of the transposed kernel on 100x4096x501.
#   cd .wtstep9 && source .gpu/setup.sh && MODE=check bash scripts/step9_wide_run.sh
set -u
: "${OUT:?}" "${MODE:=check}"
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; date -u; echo "sha ${NNBENCH_GIT_SHA:-?}"; } \
  > "$OUT/gpu.txt" 2>&1
if [ "$MODE" = check ]; then
  timeout 240 python3 scripts/step9_bench.py "$OUT/net8.csv" --shapes net8 -v tf32x3_wgmma > "$OUT/net8.log" 2>&1
  echo "rc=$?" >> "$OUT/net8.log"
else
  timeout 330 python3 -m nnbench sweep configs/step9.yaml --fresh --out "$OUT/step9.csv" > "$OUT/step9.log" 2>&1
  echo "rc=$?" >> "$OUT/step9.log"
fi
if [ "${NCU:-0}" = 1 ]; then  # one launch of the transposed kernel on 100x4096x501: where its time goes
  timeout 200 ncu --target-processes all --kernel-name gemm_wide --launch-skip 20 --launch-count 1 --clock-control none \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
    --section MemoryWorkloadAnalysis --section SourceCounters \
    python3 -m nnbench gemm -v tf32x3_wgmma --m 100 --n 4096 --k 501 --budget 0.05 > "$OUT/ncu.txt" 2>&1
  echo "rc=$?" >> "$OUT/ncu.txt"
fi
if [ "${TESTS:-1}" = 1 ]; then  # TESTS=0: the GPU tests already ran on this kernel code
  timeout 240 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_gemm_step9.py > "$OUT/gpu_tests.txt" 2>&1
  echo "rc=$?" >> "$OUT/gpu_tests.txt"
fi
date -u >> "$OUT/gpu.txt"
