#!/bin/bash
# 2026-11-29 (fourth session) call 6: Mirage's rotary task (batch 20) with its head count and size read from the
# template arguments
set -o pipefail
export OUT=${OUT:-/tmp/out}
FRESH=1 WORK=/tmp/kt-c6 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 150 --budget 20 --rounds 2 --time-budget 40 \
  bench/corpus/rotary/rotary_window_tokens_heads_element_per_thread_neox_full_width_cos_sin_rows_barrier_between_read_and_write_inplace_bf16_mirage_mpk.cu > /dev/null
rm -f $OUT/bench/bench_plot.png
grep -h "rotary_embedding_task: \(expert\|round\|per-shape\|1\.\|0\.\|original kept\)" $OUT/bench/bench.log | cut -c1-400
echo "rc $?"
