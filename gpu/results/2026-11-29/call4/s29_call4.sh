#!/bin/bash
# 2026-11-29 call 4: held-out batch 14 on first sight (commit 72db3b1: the batch, no reading), and LongCat EPS's group
# quant with the div.full.f32 reading made after call 3
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L
FRESH=1 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh ${LIMIT:-420} --budget 20 --rounds 2 --time-budget 40 \
  bench/corpus/fused_add_rms_norm/add_input_rmsnorm_post_norm_half2_block_half_hidden_fp16_eet.cu \
  bench/corpus/gated_act/gated_gelu_inplace_half2_fold_coeff_grid_fp16_eet.cu \
  bench/corpus/group_quant/per_channel_quantized_int8_char4_block_allreduce_max_fp16_fasterllama.cu \
  bench/corpus/layer_norm/layer_norm_welford_triplets_chunk4_div_sqrt_param_dim_fp16_mindspore.cu \
  bench/corpus/merge_attn_states/cp_out_correction_per_step_bshd_lse_bhs_int4_inplace_bf16_transformer_engine.cu \
  bench/corpus/rms_norm/t5norm_item_per_thread_half2_chunks_fp16_eet.cu \
  bench/corpus/rotary/rope_2d_image_cached_cos_sin_h_w_tables_grid_hwb_bshd_fp16_aiter.cu \
  bench/corpus/rotary/rope_sbhd_uncached_freqs_sincosf_reuse_front_part_partial_warp_by_heads_bf16_aiter.cu \
  bench/corpus/softmax/log_softmax_jit_rendered_cub_registers_per_thread_fp16_jittor.cu \
  bench/corpus/softmax/self_attn_softmax_causal_right_padding_len_inplace_block_per_head_loop_rows_fp16_eet.cu 
echo "rc $?"
