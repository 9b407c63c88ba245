#!/bin/bash
# On the GPU machine, from the repository root: one kernel outside the expert-template families (row_sum)
# tuned through the LLM path of `kerntune optimize`. The "model" is the loopback replay server
# (tests/llm_server.py) serving tests/data/transcripts/row_sum_loop.json, a SCRIPTED transcript (written by
# hand, not answers of a real model): the templater's first proposal is rejected and fed back, the second is
# compiled, verified and timed on the GPU like any other template; the analyst and planner answer after each
# round, the planner's first request gets a 429. Then `kerntune results` and `kerntune apply` on the copy.
# Keeps under $OUT: llm_row_sum.sqlite (the recorded store), llm_row_sum.json (summary with every model call),
# llm.log, llm_server.log, the applied file and its diff.
#   usage: bash gpu/run_llm.sh [TRANSCRIPT NAME [extra optimize options...]]
#   e.g.   bash gpu/run_llm.sh row_sum_test_sizes llm_row_sum_tests --llm-test-sizes
set -o pipefail
source .gpu/gpu-setup.sh /tmp/site >/dev/null || exit 1
export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1 KERNTUNE_CACHE=/tmp/ktcache COLUMNS=160
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
transcript=${1:-row_sum_loop}; name=${2:-llm_row_sum}; shift 2 2>/dev/null || shift $#
log="$OUT/$name.log"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv | tee "$OUT/device.txt"
python3 -c "import openai" 2>&1 | tee -a "$log" || {
  echo "the openai package does not import (its wheels, anyio and truststore included, must be in .gpu/wheels)" | tee -a "$log"
  exit 1; }
work=/tmp/kt-llm; rm -rf "$work"; mkdir -p "$work"; cp examples/row_sum.cu "$work/"
store="$OUT/$name.sqlite"; rm -f "$store" "$store-wal" "$store-shm"
unset KERNTUNE_STORE KERNTUNE_BACKEND KERNTUNE_LLM_BASE_URL KERNTUNE_LLM_MODEL OPENAI_API_KEY
# a dummy key: the scripted server ignores it; at the end no output may contain it
export KERNTUNE_LLM_API_KEY=sk-kerntune-scripted-run-DUMMY-7f3a9c
kt() { python3 -m agent_core.cli "$@"; }
rc=0

# the transcript server: it binds a free loopback port itself and prints its URL
python3 -m tests.llm_server "$transcript" > "$OUT/llm_server.log" 2>&1 &
srv=$!
trap 'kill "$srv" 2>/dev/null' EXIT
url=
for _ in $(seq 1 100); do
  url=$(sed -n 's/^KERNTUNE_LLM_BASE_URL=//p' "$OUT/llm_server.log")
  [ -n "$url" ] && break
  kill -0 "$srv" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$url" ]; then
  echo "the transcript server did not start:" | tee -a "$log"; cat "$OUT/llm_server.log" | tee -a "$log"; exit 1
fi
echo "=== transcript server (SCRIPTED $transcript) at $url" | tee -a "$log"

echo "=== row_sum: optimize through the LLM path" | tee -a "$log"
/usr/bin/time -f "wall %e s" python3 -m agent_core.cli optimize "$work/row_sum.cu" -k row_sum \
   --llm-base-url "$url" --llm-model scripted --budget 30 --rounds 3 \
   --store "$store" --json "$OUT/$name.json" "$@" 2>&1 | tee -a "$log" || rc=1

# the server exits by itself once every exchange of the transcript was served
for _ in $(seq 1 30); do kill -0 "$srv" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$srv" 2>/dev/null; then
  kill "$srv"; echo "transcript server: not every exchange was asked for (see llm_server.log)" | tee -a "$log"; rc=1
fi
wait "$srv" 2>/dev/null
echo "=== transcript server log" | tee -a "$log"; cat "$OUT/llm_server.log" | tee -a "$log"
grep -q "mismatches: none" "$OUT/llm_server.log" || rc=1

echo "=== row_sum: results" | tee -a "$log"
kt results "$work/row_sum.cu" -k row_sum --store "$store" 2>&1 | tee -a "$log" || rc=1
echo "=== row_sum: apply" | tee -a "$log"
kt apply "$work/row_sum.cu" -k row_sum --store "$store" 2>&1 | tee -a "$log" || rc=1
cp "$work/row_sum.cu" "$OUT/$name.applied.cu"
diff -u examples/row_sum.cu "$work/row_sum.cu" > "$OUT/$name.apply.diff"
nvcc -arch=sm_90 -c "$work/row_sum.cu" -o /tmp/llm_row_sum.o && echo "nvcc: $name.applied.cu compiles" | tee -a "$log"

python3 -c "import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute('PRAGMA wal_checkpoint(TRUNCATE)')" "$store"
if grep -a -r -l -F "$KERNTUNE_LLM_API_KEY" "$OUT"; then
  echo "the API key appears in the files above" | tee -a "$log"; rc=1
else
  echo "the API key appears in none of the outputs" | tee -a "$log"
fi
echo "exit $rc" | tee -a "$log"
exit $rc
