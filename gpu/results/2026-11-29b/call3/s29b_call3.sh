#!/bin/bash
# 2026-11-29 (second session) call 3: the row-shape probe, then batch 15's yalm softmax with the padded-rows reading
# and batch 11's TurboTransformers LayerNorm with the in-place-over-an-addend reading (code after 3a47e52)
set -o pipefail
export OUT=${OUT:-/tmp/out}
mkdir -p $OUT/probe
timeout 150 python3 gpu/experiments/row_shape_probe.py > $OUT/probe/row_shape_probe.json 2> $OUT/probe/row_shape_probe.err
cat $OUT/probe/row_shape_probe.json; tail -3 $OUT/probe/row_shape_probe.err
FRESH=1 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh ${LIMIT:-300} --budget 20 --rounds 2 --time-budget 40 \
  bench/corpus/softmax/attn_softmax_block_per_head_warp_size_block_max_seq_len_rows_inplace_f32_yalm.cu \
  bench/corpus/layer_norm/add_bias_layer_norm_inplace_sum_sumsq_while_f32_turbo.cu
echo "rc $?"
