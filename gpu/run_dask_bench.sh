#!/bin/bash
# On the GPU machine, from the repository root (with .gpu carried): the bench in process, then the same bench
# through a local Dask cluster (one worker per GPU: --gpus 1 here) with that worker killed (SIGKILL) mid-run;
# the killed kernel must be redone (its nanny restarts the worker) and the figures must agree within noise.
#   usage: bash gpu/run_dask_bench.sh [kerntune bench options...]
#   default options: --only softmax --only layer_norm --only silu_and_mul --budget 12 --rounds 1
# Everything (logs, results, stores) goes back under $OUT/dask. About 3-4 minutes on an H100.
set -o pipefail
source .gpu/gpu-setup.sh /tmp/site >/dev/null || exit 1
source gpu/kill_worker.sh
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/wheels-dask/*.whl 2>&1 | grep -v "already exists" || true
export PYTHONPATH=$PWD:/tmp/site:$PYTHONPATH PYTHONUNBUFFERED=1 KERNTUNE_CACHE=/tmp/ktcache COLUMNS=160
OUT=${OUT:-/tmp/out}; work=/tmp/kt-dask; rm -rf "$work"; mkdir -p "$work" "$OUT/dask"
opts=("$@"); [ ${#opts[@]} -eq 0 ] && opts=(--only softmax --only layer_norm --only silu_and_mul --budget 12 --rounds 1)
python3 -c "import dask, distributed; print('dask', dask.__version__, 'distributed', distributed.__version__)" || exit 1
nvidia-smi -L

echo "== 1. in process"
t0=$(date +%s)
timeout 150 python3 -m agent_core.cli bench "${opts[@]}" --out "$work/inproc" > "$work/inproc.log" 2>&1
rc1=$?; echo "rc $rc1, $(( $(date +%s) - t0 )) s"; grep -E "^[a-z_0-9]+: [0-9.]+x|geomean" "$work/inproc.log"

echo "== 2. local Dask cluster (--gpus 1), its worker killed 5 s into the second kernel"
t0=$(date +%s)
timeout 190 python3 -m agent_core.cli bench "${opts[@]}" --gpus 1 --out "$work/dask" > "$work/dask.log" 2>&1 &
bench=$!
kill_unit_worker "$work/dask.log" 2 $bench
wait $bench; rc2=$?
echo "rc $rc2, $(( $(date +%s) - t0 )) s"
grep -E "started on worker|redone on worker|^[a-z_0-9]+: [0-9.]+x|geomean" "$work/dask.log"

echo "== 3. comparison"
python3 gpu/compare_bench.py "$work/inproc/bench_results.json" "$work/dask/bench_results.json" --rel 0.05
rc3=$?
python3 - "$work/dask/bench_results.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
redone = [k["name"] for k in d["kernels"] if len(k.get("attempts") or []) > 1]
print("runner:", d.get("runner"), "| redone after the kill:", ", ".join(redone) or "NONE")
PY
cp -r "$work/." "$OUT/dask/"
[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && exit $rc3
exit 1
