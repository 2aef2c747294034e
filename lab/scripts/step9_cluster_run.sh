#!/usr/bin/env bash
# Issue 27 (branch step9-cluster) on the lent H100, one call: the clusters x persistent sweep, step 9 on
# every shape of the issue (configs/step9.yaml), step 9's GPU tests (clusters and the persistent loop among
# them) and the batched trainer on the same mainloop (CLUSTER_SWEEP=0 skips the first); optionally 4096^3 against an older tree (AB_OLD), Nsight
# Compute on the two Net 8 shapes still below cuBLAS (NCU=1), and the new GPU tests on planted defects, which
# must fail (PLANT=1). Writes under $OUT. Run from the checkout after `source .gpu/setup.sh`.
set -u -o pipefail
out=${OUT:?}
if [ "${CLUSTER_SWEEP:-1}" = 1 ]; then
  timeout 200 python3 -m nnbench sweep lab/configs/step9_cluster.yaml --fresh --out "$out/cluster.csv" > "$out/cluster.log" 2>&1
  tail -3 "$out/cluster.log"
fi
timeout 200 python3 -m nnbench sweep configs/step9.yaml --fresh --out "$out/step9.csv" > "$out/step9.log" 2>&1
tail -3 "$out/step9.log"
timeout 240 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_gemm_step9.py 2>&1 | tee "$out/gpu_tests.txt" | tail -4
timeout 240 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_mlp.py -k wgmma 2>&1 | tee -a "$out/gpu_tests.txt" | tail -2
# 4096^3 was ~2% slower after the small-shape change: this tree against an older one (AB_OLD, a `git archive`
# of 6fc1f24 beside this checkout), alternately in fresh processes, the same settings.
if [ -d "${AB_OLD:-/nonexistent}" ]; then
  here=$PWD
  for round in 1 2; do
    for tree in "$AB_OLD" "$here"; do
      (cd "$tree" && PYTHONPATH="/tmp/nnbench-gpu-site:$tree" timeout 90 python3 -m nnbench gemm --size 4096 \
        -v tf32x3_wgmma --no-cublas --budget 2 --seed 7 2>&1 | grep -E "tf32x3_wgmma" | sed "s|^|$round $(basename "$tree") |")
    done
  done 2>&1 | tee "$out/ab_4096.txt"
fi
if [ "${NCU:-0}" = 1 ]; then
  for shape in "100 4096 501" "7 4096 101"; do
    set -- $shape
    timeout 150 python3 -m nnbench profile gemm -v tf32x3_wgmma --m $1 --n $2 --k $3 --bm 64 --bn 64 --ncu \
      > "$out/ncu_$1x$2x$3.txt" 2>&1
    tail -25 "$out/ncu_$1x$2x$3.txt"
  done
fi
[ "${PLANT:-0}" = 1 ] || exit 0
# Planted defects, in a copy: the consumers store every later tile one tile off (persistent loop); a
# block's multicast share of B comes from 8 columns further on (clusters). Each must fail its test.
plant=/tmp/step9-plant && rm -rf "$plant" && cp -r . "$plant" && cd "$plant" || exit 1
export PYTHONPATH="/tmp/nnbench-gpu-site:$plant" NNBENCH_CACHE=/tmp/step9-plant-cache
k=kernels_cu/gemm/09_tf32x3_wgmma.cu ml=kernels_cu/common/wgmma_mainloop.cuh
sed -i 's/const int m0 = t % tiles_m \* BM, n0 = t \/ tiles_m \* BN;/const int m0 = (t + (t != first)) % tiles_m * BM, n0 = (t + (t != first)) \/ tiles_m * BN;/' $k
grep -c "(t != first)" $k
timeout 240 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_gemm_step9.py -k "persistent and not cluster" 2>&1 \
  | tee "$out/planted.txt" | tail -2
cp "$OLDPWD/$k" $k
sed -i 's/b_map, k0, n0 + part, ring.full(s)/b_map, k0, n0 + part + 8, ring.full(s)/' $ml
grep -c "n0 + part + 8" $ml
timeout 240 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_gemm_step9.py -k "cluster2 and not persistent" 2>&1 \
  | tee -a "$out/planted.txt" | tail -2
