#!/bin/bash
# On a GPU machine with several GPUs (nvidia-h200-x2 or larger), from the repository root, .gpu carried
# (wheels, gpu-setup.sh, wheels-dask): the whole bench suite through the Dask runner on GPUS GPUs, one run
# from scratch (its own store), its wall time printed; with KILL=1 the worker running the third unit is killed
# (SIGKILL) 5 s into it, and its nanny restarts it so that the unit is redone.
#   usage: [KILL=1] bash gpu/run_multi_gpu_bench.sh GPUS SECONDS [kerntune bench options...]
#   SECONDS: an interrupt then (the kernels in flight on the workers run on; they are killed 20 s later, and what
#   finished before is copied back: results are written after every kernel);
#   GPUS: 1 or all; default options: --budget 30 --rounds 3 (the figure of record's); kernel files may follow them
#   GPU_SETUP: the wheels' setup script (default .gpu/gpu-setup.sh; .gpu/benchw/gpu-setup.sh where the tree and the
#   full wheels would pass the device's 64 MiB); RESUME=DIR: resume the results carried in DIR (a run cut into
#   several device calls; the kernels finished there are kept, the rest run)
# Logs, bench_results.json/.md and the store come back under $OUT/multi_<GPUS>. Compare two runs with
#   python3 gpu/compare_bench.py A/bench_results.json B/bench_results.json
set -o pipefail
source "${GPU_SETUP:-.gpu/gpu-setup.sh}" /tmp/site >/dev/null || exit 1
source gpu/kill_worker.sh
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/wheels-dask/*.whl 2>&1 | grep -v "already exists" || true
export PYTHONPATH=$PWD:/tmp/site:$PYTHONPATH PYTHONUNBUFFERED=1 KERNTUNE_CACHE=/tmp/ktcache-$1 COLUMNS=160
OUT=${OUT:-/tmp/out}; gpus=$1; limit=$2; shift 2
opts=("$@"); [ ${#opts[@]} -eq 0 ] && opts=(--budget 30 --rounds 3)
work=/tmp/kt-multi-$gpus; rm -rf "$work" "$KERNTUNE_CACHE"; mkdir -p "$work" "$OUT/multi_$gpus"
[ -n "$RESUME" ] && cp -r "$RESUME/." "$work/" && opts+=(--resume)
nvidia-smi -L; nproc
python3 -c "import dask, distributed; print('dask', dask.__version__, 'distributed', distributed.__version__)" || exit 1

t0=$(date +%s.%N)
timeout -k 20 -s INT "$limit" python3 -m agent_core.cli bench "${opts[@]}" --gpus "$gpus" --out "$work" > "$work/bench.log" 2>&1 &
bench=$!
[ -n "$KILL" ] && kill_unit_worker "$work/bench.log" 3 $bench
wait $bench; rc=$?
t1=$(date +%s.%N)
echo "rc $rc; wall $(python3 -c "print(round($t1 - $t0, 1))") s for the suite on --gpus $gpus"
grep -E "started on worker|redone on worker|^[a-z_0-9]+: [0-9.]+x|geomean|where the time went" "$work/bench.log"
python3 - "$work/bench_results.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
redone = [k["name"] for k in d["kernels"] if len(k.get("attempts") or []) > 1]
print("runner:", d.get("runner"), "| redone after a lost worker:", ", ".join(redone) or "none")
for k in d["kernels"]:
    print(f"  {k['name']}: {k['status']} {k.get('speedup')} on", "; ".join(f"{a['worker']} pid {a['pid']}" for a in k.get("attempts") or []))
PY
cp -r "$work/." "$OUT/multi_$gpus/"
exit $rc
