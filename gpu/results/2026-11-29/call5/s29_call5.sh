#!/bin/bash
# 2026-11-29 call 5: batch 14's variants that got readings after call 4 (EET's skip RMSNorm, MindSpore's LayerNorm
# variance output, Jittor's log-softmax)
set -o pipefail
export OUT=${OUT:-/tmp/out}
FRESH=1 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh ${LIMIT:-300} --budget 20 --rounds 2 --time-budget 40 \
  bench/corpus/fused_add_rms_norm/add_input_rmsnorm_post_norm_half2_block_half_hidden_fp16_eet.cu \
  bench/corpus/layer_norm/layer_norm_welford_triplets_chunk4_div_sqrt_param_dim_fp16_mindspore.cu \
  bench/corpus/softmax/log_softmax_jit_rendered_cub_registers_per_thread_fp16_jittor.cu
echo "rc $?"
