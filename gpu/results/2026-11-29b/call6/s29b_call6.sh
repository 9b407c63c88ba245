#!/bin/bash
# 2026-11-29 (second session) call 6: held-out batch 17 on first sight (its commit; no reading it asked for)
set -o pipefail
export OUT=${OUT:-/tmp/out}
FRESH=1 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh ${LIMIT:-500} --budget 20 --rounds 2 --time-budget 40 \
  bench/corpus/fused_add_rms_norm/add_rmsnorm_sum_and_norm_outputs_smem_tree_block_256_extern_c_bf16_infernum.cu \
  bench/corpus/gated_act/fused_activation_multiply_silu_two_inputs_half2_pairs_gridstride_half_math_fp16_swifttransformer.cu \
  bench/corpus/group_quant/per_token_per_block_fp8_warp_per_128_group_ceil_tail_tokens_stride_grid_1056_bf16_fastdeploy.cu \
  bench/corpus/layer_norm/layer_norm_nc_single_pass_sum_sumsq_ehalf4_float4_gain_threads_template_mean_rstd_out_fp16_blocksparse.cu \
  bench/corpus/merge_attn_states/lse_combine_shared_unshared_prefix_base2_lse_grid_y_rows_128_threads_fp16_xllm.cu \
  bench/corpus/rms_norm/llama_rmsnorm_thread_per_row_matrix3d_grid_16x16_f32_weight_fp16_tinychatengine.cu \
  bench/corpus/rotary/rotary_pos_emb_thread_per_token_head_major_rotate_half_local_buffers_hfma_inplace_fp16_tinychatengine.cu \
  bench/corpus/rotary/rotate_sink_tiled_transposed_key_cache_layers_grid_y_exp2f_one_position_inplace_fp16_calm.cu \
  bench/corpus/softmax/masked_softmax_length_mask_warp_per_row_grid_b_h_q_scale_on_input_f32_tcop.cu \
  bench/corpus/softmax/softmax_reduce_block_per_row_cu1dblock_smem_tree_then_warp_matrixdim_strides_f32_kaldi.cu
echo "rc $?"
