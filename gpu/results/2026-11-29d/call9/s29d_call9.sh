#!/bin/bash
# 2026-11-29 (fourth session) call 9: Mirage's rotary task with its layout template arguments no longer tuned
set -o pipefail
export OUT=${OUT:-/tmp/out}
FRESH=1 WORK=/tmp/kt-c9 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 100 --budget 20 --rounds 2 --time-budget 40 \
  bench/corpus/rotary/rotary_window_tokens_heads_element_per_thread_neox_full_width_cos_sin_rows_barrier_between_read_and_write_inplace_bf16_mirage_mpk.cu > /dev/null
rm -f $OUT/bench/bench_plot.png $OUT/bench/results.sqlite
grep "^| rotary_embedding_task | ok" $OUT/bench/bench_results.md
grep -h "rotary_embedding_task: \(round\|plan\)" $OUT/bench/bench.log | cut -c1-200
echo "rc $?"
