#!/bin/bash
# 2026-11-29 (second session) call 4: held-out batch 16 on first sight (code after the batch's commit, no reading it
# asked for) and batch 15's ByteTransformer softmax with the bias-tensor reading (28c6c9e)
set -o pipefail
export OUT=${OUT:-/tmp/out}
FRESH=1 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh ${LIMIT:-540} --budget 20 --rounds 2 --time-budget 40 \
  bench/corpus/fused_add_rms_norm/layernorm_nobeta_addbias_full_residual_ite_registers_1024_threads_ldg_half_add_fp16_dashinfer.cu \
  bench/corpus/gated_act/swiglu_gate_up_tensors_fp32x4_reinterpret_first_warp_tail_flat_bf16_cute_kernels.cu \
  bench/corpus/group_quant/per_token_asym_int8_outlier_columns_gather_smem_minmax_tree_idle_blocks_fp16_quik.cu \
  bench/corpus/layer_norm/layer_norm_double_sum_sumsq_shfl_down_width_steps_128_threads_f32_affine_f32_tnn.cu \
  bench/corpus/merge_attn_states/sdpa_vector_2pass_combine_32_blocks_base2_max_sum_unnormalized_cg_1024_threads_f32_to_bf16_mlx.cu \
  bench/corpus/rms_norm/rms_norm_pow2_block_tree_smem_mean_before_reduce_row_stride_inout_bf16_chitu.cu \
  bench/corpus/rotary/rope_compute_float_halfmode_template_grid_head_seq_block_n_rot_half_n_past_powf_theta_scale_f32_inferllm.cu \
  bench/corpus/rotary/rope_neox_grid_b_t_heads_half_head_threads_position_is_t_powf_fast_sincos_bf16_koifish.cu \
  bench/corpus/softmax/forward_masked_softmax_rows_per_block_kv_shards_4_shared_atomic_max_sum_bool_mask_bf16_tgi.cu \
  bench/corpus/softmax/softmax_thread_per_row_groups_offsets_stride_temperature_cuda_gridsize_f32_darknet.cu \
  bench/corpus/softmax/softmax_warp_per_head_block_per_word_mask_bias_smem_row_head_major_inplace_fp16_bytetransformer.cu
echo "rc $?"
