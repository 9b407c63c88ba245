#!/bin/bash
# 2026-11-30 call 4: held-out batch 32 on first sight (written this session, no reading of it), and ManagedLlama2's
# rope (batch 30) after the llama2.c-style reading
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L
B32=$(python3 - <<'PY'
import tomllib
v = tomllib.load(open("bench/corpus/corpus.toml", "rb"))["variant"]
print(" ".join("bench/corpus/" + x["file"] for x in v if "batch 32," in x["style"]))
PY
)
echo $B32 | wc -w
ML2=$(ls bench/corpus/rotary/*_managedllama2.cu)
FRESH=1 WORK=/tmp/kt-b32 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 500 --budget 20 --rounds 2 --time-budget 40 $B32 $ML2 > /dev/null
rm -f $OUT/bench/bench_plot.png $OUT/bench/results.sqlite; mv $OUT/bench $OUT/b32
grep -A16 "## Per kernel" $OUT/b32/bench_results.md
echo done
