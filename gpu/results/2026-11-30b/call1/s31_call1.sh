#!/bin/bash
# 2026-11-30 (second session) call 1: batch 33 on first sight
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L
B33=$(python3 - <<'P'
import re
src=open('bench/corpus/corpus.toml').read()
parts=re.split(r'(?m)^\[\[variant\]\]', src)
for i in range(1,len(parts)):
    if 'batch 33 by a helper' in parts[i-1].rstrip().splitlines()[-1]:
        print('bench/corpus/'+re.search(r'^file\s*=\s*"([^"]+)"', parts[i], re.M).group(1))
P
)
echo "$B33"
FRESH=1 WORK=/tmp/kt-b33 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 480 --budget 20 --rounds 2 --time-budget 40 $B33 > /dev/null
rm -f $OUT/bench/bench_plot.png $OUT/bench/results.sqlite; mv $OUT/bench $OUT/b33
grep -A14 "## Per kernel" $OUT/b33/bench_results.md
echo done
