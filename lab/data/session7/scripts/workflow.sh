# session 7: .github/workflows/gpu-regression.yml's steps on the lent GPU, twice, as a runner would for two pushes to
# main (scripts/workflow_local.py); each run starts from a clean results/ as a fresh checkout does, the runner's
# tool cache (the SQLite history) kept between them
set -u
source .s7/env.sh
o=$OUT/wf; mkdir -p $o
nvidia-smi --query-gpu=name,uuid,driver_version --format=csv > $o/gpu.txt; date -u >> $o/gpu.txt
# the device has no network and its python3 is the one with every package: the install step becomes a .venv whose
# activate puts an `nnbench` (python3 -m nnbench) and a `python` (python3) on PATH
INSTALL='mkdir -p .venv/bin
printf "export PATH=\"%s/.venv/bin:\$PATH\"\n" "$PWD" > .venv/bin/activate
printf "#!/bin/sh\nexec python3 -m nnbench \"\$@\"\n" > .venv/bin/nnbench
printf "#!/bin/sh\nexec python3 \"\$@\"\n" > .venv/bin/python
chmod +x .venv/bin/nnbench .venv/bin/python
. .venv/bin/activate
nnbench devices'
for k in 1 2; do
  rm -rf results/ci-* results/history results/history.txt .venv
  s=$(date +%s)
  python3 scripts/workflow_local.py $o/run$k --tool-cache $o/tool-cache --skip "GPU tests" \
    --replace "Install nnbench with the gpu extra=$INSTALL" > $o/run$k.out 2>&1
  echo "workflow run $k rc=$? $(( $(date +%s)-s )) s" >> $o/log
  mkdir -p $o/run$k/results && cp -r results/ci-* results/history results/history.txt $o/run$k/results/ 2>/dev/null
done
ls -la $o/tool-cache/nnbench >> $o/log 2>&1
cat $o/log
