#!/bin/bash
# 2026-11-28h call 1: what changed since its last GPU run: the NF4 / FP4 codebook bindings (never run on a GPU),
# MXNet's softmax (its per-shape dispatch stopped optimize, 28g call 4), and the kernels that got a structural
# template this session (TurboTransformers' LayerNorm: a capped int given to a dim3; two RMSNorms and a combine: a
# warp count given to a dim3; a group quant whose template argument is now tied to its own parameter)
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L; nproc
FRESH=1 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh ${LIMIT:-560} --budget 20 --rounds 2 --time-budget 50 \
  bench/corpus/group_quant/quantize_blockwise_nf4_cub_load_store_fp16.cu \
  tests/data/cu/styles/quant_nf4_warp_blocks_constant_table_low_nibble_bf16.cu \
  tests/data/cu/styles/quant_fp4_block_smem_tree_divide_f32.cu \
  bench/corpus/softmax/softmax_stride1_smem_rows_per_block_length_mask_fp16_mxnet.cu \
  bench/corpus/layer_norm/add_bias_layer_norm_inplace_sum_sumsq_while_f32_turbo.cu \
  bench/corpus/rms_norm/qk_norm_per_head_warp_bf16.cu \
  bench/corpus/rms_norm/rmsnorm_fwd_warp_rows_rsigma_zero_centered_bf16.cu \
  bench/corpus/merge_attn_states/combine_fp32_partials_bf16_out.cu \
  bench/corpus/group_quant/group_quant_fp8_block_per_group_cub_bf16.cu
echo "rc $?"
