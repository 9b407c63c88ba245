#!/bin/bash
# 2026-11-29 (eighth session) call 4: held-out batch 30 on first sight (written this session, no reading of it)
# (Kernel Tuner not run)
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L
B30=$(python3 - <<'PY'
import tomllib
v = tomllib.load(open("bench/corpus/corpus.toml", "rb"))["variant"]
print(" ".join("bench/corpus/" + x["file"] for x in v if "batch 30," in x["style"]))
PY
)
echo $B30 | wc -w
FRESH=1 WORK=/tmp/kt-b30 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 300 --budget 20 --rounds 2 --time-budget 40 $B30 > /dev/null
rm -f $OUT/bench/bench_plot.png $OUT/bench/results.sqlite; mv $OUT/bench $OUT/b30
grep -A16 "## Per kernel" $OUT/b30/bench_results.md
echo done
