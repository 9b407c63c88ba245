#!/bin/bash
# 2026-11-29 (seventh session) call 4: batch 27 in one run with the session's code (after QuACK's fp32-sum reading and
# the loop keeping its rounds when a later template cannot be tuned), then the bench suite in one run
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L
B27=$(python3 - <<'PY'
import tomllib
v = tomllib.load(open("bench/corpus/corpus.toml", "rb"))["variant"]
print(" ".join("bench/corpus/" + x["file"] for x in v if "batch 27," in x["style"]))
PY
)
FRESH=1 WORK=/tmp/kt-b27b GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 200 --budget 20 --rounds 2 --time-budget 40 $B27 > /dev/null
rm -f $OUT/bench/bench_plot.png $OUT/bench/results.sqlite; mv $OUT/bench $OUT/b27
grep -A14 "## Per kernel" $OUT/b27/bench_results.md
FRESH=1 WORK=/tmp/kt-suite GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 300 --budget 30 --rounds 3 > /dev/null
rm -f $OUT/bench/bench_plot.png
mv $OUT/bench $OUT/suite
grep -B2 -A14 "## Per kernel" $OUT/suite/bench_results.md
echo done
