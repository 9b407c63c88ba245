#!/bin/bash
# 2026-11-29 (second session) call 1: held-out batch 15 on first sight (code 62d41d5 + the batch, no reading)
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L
FRESH=1 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh ${LIMIT:-540} --budget 20 --rounds 2 --time-budget 40 \
  bench/corpus/fused_add_rms_norm/fused_add_rms_norm_dst_add_reread_template_block_256_or_1024_f32_ik_llama.cu \
  bench/corpus/gated_act/dequant_silu_and_mul_quant_int32_gemm_out_tmp_buffer_per_token_int8_qserve.cu \
  bench/corpus/group_quant/quant_per_block_int8_fuse_sub_mean_k_nhd_strides_grid_blocks_heads_batch_bf16_sageattention.cu \
  bench/corpus/layer_norm/add_bias_input_layernorm_v2_ite4_half2_fp32_gamma_void_ptr_fixed_eps_fp16_bytetransformer.cu \
  bench/corpus/merge_attn_states/mla_split_kv_reduction_block_per_head_batch_warp0_lse_smem_scales_f32_to_bf16_cutlass.cu \
  bench/corpus/rms_norm/rmsnorm_fp16_i4_reorder_outlier_int8_group_smem_tree_scale_index_layout_fp16_atom.cu \
  bench/corpus/rotary/rope_fortran_2_by_m_by_n_pairs_flat_index_sin_cos_tables_bf16_math_out_of_place_nntile.cu \
  bench/corpus/rotary/rope_neox_grid_batch_seq_chunk_theta_powf_per_element_pos_ids_i64_half_math_refactorgraph.cu \
  bench/corpus/softmax/attn_softmax_block_per_head_warp_size_block_max_seq_len_rows_inplace_f32_yalm.cu \
  bench/corpus/softmax/softmax_warp_per_head_block_per_word_mask_bias_smem_row_head_major_inplace_fp16_bytetransformer.cu
echo "rc $?"
