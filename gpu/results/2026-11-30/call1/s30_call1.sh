#!/bin/bash
# 2026-11-30 call 1: held-out batch 31 on first sight (written this session, no reading of it), and Gemma's rope
# (batch 30) after the int-base reading
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L
B31=$(python3 - <<'PY'
import tomllib
v = tomllib.load(open("bench/corpus/corpus.toml", "rb"))["variant"]
print(" ".join("bench/corpus/" + x["file"] for x in v if "batch 31," in x["style"]))
PY
)
echo $B31 | wc -w
GEMMA=$(ls bench/corpus/rotary/*_gemma.cu)
FRESH=1 WORK=/tmp/kt-b31 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 480 --budget 20 --rounds 2 --time-budget 40 $B31 $GEMMA > /dev/null
rm -f $OUT/bench/bench_plot.png $OUT/bench/results.sqlite; mv $OUT/bench $OUT/b31
grep -A16 "## Per kernel" $OUT/b31/bench_results.md
echo done
