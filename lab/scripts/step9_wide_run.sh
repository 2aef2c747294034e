#!/bin/bash
# Step 9's transposed path on the lent GPU, one call (issue 27, session 5), results under $OUT:
#   MODE=check: Net 8's training GEMMs at batch 4096 against cuBLAS (lab/scripts/step9_bench.py), then the step 9
#               GPU tests (new wide shapes, planted defects);
#   MODE=final: `nnbench sweep configs/step9.yaml` (4096^3, the CI shapes, Net 8, the odd shapes; cuBLAS
#               beside) and the step 9 GPU tests.
#   NCU=1: also `nnbench profile ... --ncu` of the transposed kernel on 100x4096x501 and 7x4096x101.
#   cd .wtstep9 && source .gpu/setup.sh && MODE=check bash lab/scripts/step9_wide_run.sh
set -u
: "${OUT:?}" "${MODE:=check}"
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; date -u; echo "sha ${NNBENCH_GIT_SHA:-?}"; } \
  > "$OUT/gpu.txt" 2>&1
if [ "$MODE" = check ]; then
  timeout 240 python3 lab/scripts/step9_bench.py "$OUT/net8.csv" --shapes net8 -v tf32x3_wgmma > "$OUT/net8.log" 2>&1
  echo "rc=$?" >> "$OUT/net8.log"
else
  timeout 330 python3 -m nnbench sweep configs/step9.yaml --fresh --out "$OUT/step9.csv" > "$OUT/step9.log" 2>&1
  echo "rc=$?" >> "$OUT/step9.log"
fi
if [ "${NCU:-0}" = 1 ]; then  # where the transposed kernel's time goes (nnbench profile: one launch under ncu)
  for mnk in "100 4096 501" "7 4096 101"; do
    set -- $mnk
    timeout 150 python3 -m nnbench profile gemm -v tf32x3_wgmma --m "$1" --n "$2" --k "$3" --ncu \
      > "$OUT/profile_$1x$2x$3.txt" 2>&1
    echo "rc=$?" >> "$OUT/profile_$1x$2x$3.txt"
  done
fi
if [ "${TESTS:-1}" = 1 ]; then  # TESTS=0: the GPU tests already ran on this kernel code
  timeout 240 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_gemm_step9.py > "$OUT/gpu_tests.txt" 2>&1
  echo "rc=$?" >> "$OUT/gpu_tests.txt"
fi
date -u >> "$OUT/gpu.txt"
