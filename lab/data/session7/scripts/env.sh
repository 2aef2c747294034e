# sourced at the start of every device call of session 7
source .gpu/setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site2 .whl/*.whl 2>/dev/null
export PYTHONPATH=${PYTHONPATH:-}:/tmp/site2 PYTHONUNBUFFERED=1 NNBENCH_CACHE=/tmp/nncache-gate
