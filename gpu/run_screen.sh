#!/bin/bash
# On the GPU machine, from the repository root: screen every candidate expert binding of the bench and corpus
# kernels as `kerntune optimize` does before round 1 (bench/gpu_screen_bindings.py): the table and every verdict
# under $OUT/screen.   usage: bash gpu/run_screen.sh SECONDS [--family F ...]
set -o pipefail
source .gpu/gpu-setup.sh /tmp/site >/dev/null || exit 1
export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1 KERNTUNE_CACHE=/tmp/ktcache COLUMNS=160
OUT=${OUT:-/tmp/out}; limit=$1; shift
mkdir -p "$OUT/screen"
tag=$(echo "$*" | tr -c 'a-z_\n' '_' | tr -s _); tag=${tag:-all}
timeout -s INT "$limit" python3 bench/gpu_screen_bindings.py --backend gpu --json "$OUT/screen/screen.$tag.json" "$@" \
  2>&1 | tee "$OUT/screen/screen.$tag.log"
