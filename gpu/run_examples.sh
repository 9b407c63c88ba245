#!/bin/bash
# On the GPU machine, from the repository root: tune the example kernels with the CLI, apply the best
# configuration to copies of the files (apply compiles with nvcc and re-verifies on the GPU), and keep the
# recorded store, the JSON summaries and the logs under $OUT.
#   usage: bash gpu/run_examples.sh [KERNEL...]   (default: row_sum silu scale_rows)
set -o pipefail
source .gpu/gpu-setup.sh /tmp/site >/dev/null || exit 1
export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1 KERNTUNE_CACHE=/tmp/ktcache COLUMNS=160
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv | tee "$OUT/device.txt"
work=/tmp/kt-examples; rm -rf "$work"; mkdir -p "$work"; cp examples/*.cu "$work/"
export KERNTUNE_STORE="$OUT/examples.sqlite"
kt() { python3 -m agent_core.cli "$@"; }
rc=0
for k in ${@:-row_sum silu scale_rows}; do
  echo "=== $k: tune" | tee -a "$OUT/examples.log"
  /usr/bin/time -f "wall %e s" python3 -m agent_core.cli tune "$work/$k.cu" -k "$k" --strategy exhaustive --budget 200 \
     --json "$OUT/$k.tune.json" 2>&1 | tee -a "$OUT/examples.log" || rc=1
  echo "=== $k: apply" | tee -a "$OUT/examples.log"
  kt apply "$work/$k.cu" -k "$k" 2>&1 | tee -a "$OUT/examples.log" || rc=1
  cp "$work/$k.cu" "$OUT/$k.applied.cu"
  diff -u "examples/$k.cu" "$work/$k.cu" > "$OUT/$k.apply.diff"
  nvcc -arch=sm_90 -c "$work/$k.cu" -o /tmp/$k.o && echo "nvcc: $k.applied.cu compiles" | tee -a "$OUT/examples.log"
done
exit $rc
