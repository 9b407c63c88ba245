#!/bin/bash
# On the GPU machine, from the repository root: `kerntune bench` over bench/*.cu, resuming the results
# carried in .gpu/bench (a run cut into several device calls), and everything back under $OUT/bench.
#   usage: [FRESH=1] [RESUME=DIR] bash gpu/run_bench.sh SECONDS [kerntune bench options...]
#   WORK, SITE, KERNTUNE_CACHE: the run's scratch folder, wheels folder and compile cache (default /tmp/kt-bench,
#   /tmp/site, /tmp/ktcache); two runs side by side (one a GPU: CUDA_VISIBLE_DEVICES) give each its own
#   RESUME: the carried results to resume (default .gpu/bench), e.g. RESUME=.gpu/other for a corpus folder
#   GPU_SETUP: the wheels' setup script (default .gpu/gpu-setup.sh); e.g. .gpu/slim/gpu-setup.sh beside a copy of
#   the wheels without the LLM client's (openai, pydantic, httpx2, jiter), where the tree and the carried folders
#   would pass the device's 64 MiB; .gpu/benchw/gpu-setup.sh (2026-11-25n) beside those wheels less sqlalchemy, alembic,
#   mako, greenlet and pytest's (optuna's in-memory storage needs none of them) once the tree itself grew
# The run ends with "where the time went (all kernels)"; bench_results.json/.md hold it per kernel.
set -o pipefail
source "${GPU_SETUP:-.gpu/gpu-setup.sh}" "${SITE:-/tmp/site}" >/dev/null || exit 1
export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1 KERNTUNE_CACHE=${KERNTUNE_CACHE:-/tmp/ktcache} COLUMNS=160
OUT=${OUT:-/tmp/out}; limit=$1; shift
work=${WORK:-/tmp/kt-bench}; rm -rf "$work"; mkdir -p "$work"
# FRESH=1: one run from scratch (the results carried in .gpu/bench are not resumed)
resume=${RESUME:-.gpu/bench}
[ -z "$FRESH" ] && [ -d "$resume" ] && cp -r "$resume/." "$work/"
timeout -s INT "$limit" python3 -m agent_core.cli bench --out "$work" --resume "$@" 2>&1 | tee -a "$work/bench.log"
rc=$?
mkdir -p "$OUT/bench" && cp -r "$work/." "$OUT/bench/"
exit $rc
