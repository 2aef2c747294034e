#!/usr/bin/env bash
# Issue 29 on the lent GPU, in one call (lab/journal/measurement.md): the measurement GPU tests with the
# schema check (jsonschema from wheels staged in .whl/), then lab/scripts/measurement_targets.py (NVML costs,
# energy long and short, the harness's overhead against base29/ and head29/, the planted slowdowns, back-to-
# back runs of configs/ci.yaml until the time left is spent), then the trainers' NVML test on a planted defect.
#   bash lab/scripts/measurement_device.sh OUT_DIR SECONDS     (from the tree's root, after .gpu/setup.sh)
set -u
out=$1
total=${2:-450}
t0=$(date +%s)
left() { echo $(( total - ($(date +%s) - t0) )); }
mkdir -p "$out"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site-gate .whl/*.whl \
    && export PYTHONPATH="/tmp/site-gate:$PYTHONPATH"
fi
nvidia-smi > "$out/nvidia-smi.txt" 2>&1
python3 -c "import jsonschema; print('jsonschema', jsonschema.__version__)" > "$out/gpu_tests.log" 2>&1
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -rs tests/test_gpu_measurement.py >> "$out/gpu_tests.log" 2>&1
echo "pytest rc=$? at $(( $(date +%s) - t0 )) s" >> "$out/gpu_tests.log"
tail -3 "$out/gpu_tests.log"
python3 lab/scripts/measurement_targets.py "$out" --pairs 20 --deadline $(( $(left) - 45 ))
echo "targets done at $(( $(date +%s) - t0 )) s"
if [ "$(left)" -gt 40 ]; then
  # The same test on a planted defect: the fused trainer's launches without their NVML probe.
  rm -rf /tmp/planted && mkdir -p /tmp/planted && cp -r nnbench tests kernels_cu configs pyproject.toml /tmp/planted/
  sed -i 's/net.train(n, hyper.tolerance, watch.during)/net.train(n, hyper.tolerance)/' /tmp/planted/nnbench/workloads/train/mlp.py
  grep -c "watch.during)" /tmp/planted/nnbench/workloads/train/mlp.py > "$out/planted_test.log"
  (cd /tmp/planted && PYTHONPATH="/tmp/nnbench-gpu-site:/tmp/site-gate:/tmp/planted" timeout $(( $(left) - 5 )) \
     python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_measurement.py -k per_sample) >> "$out/planted_test.log" 2>&1
  echo "planted rc=$?" >> "$out/planted_test.log"
fi
echo "all done at $(( $(date +%s) - t0 )) s"
