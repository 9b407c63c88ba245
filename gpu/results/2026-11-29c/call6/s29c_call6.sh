#!/bin/bash
# 2026-11-29 (third session) call 6 (code 974de73): seven more variants of batches 1-17 drawn at random
# (random.Random(20261130).sample of the 189 family variants of those batches not in call 5's sample)
set -o pipefail
export OUT=${OUT:-/tmp/out}
FRESH=1 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh ${LIMIT:-290} --budget 20 --rounds 2 --time-budget 30 \
  bench/corpus/fused_add_rms_norm/add_rms_norm_fp32_residual.cu \
  bench/corpus/layer_norm/cu_layernorm_forward_batch_n_m_normalize_dim1_transpose_reduce_rd_mean_fp16_cpm_kernels.cu \
  bench/corpus/gated_act/gate_fuse_runtime_act_type_grid_z_columns_bf16_zhilight.cu \
  bench/corpus/merge_attn_states/merge_partial_warp_f32.cu \
  bench/corpus/merge_attn_states/combine_max_sumexp_fp16.cu \
  bench/corpus/softmax/online_softmax_fused_chunk_max_temperature_bf16_to_f32.cu \
  bench/corpus/rms_norm/rms_norm_persistent_atomic_rows_fp16.cu
echo "rc $?"
