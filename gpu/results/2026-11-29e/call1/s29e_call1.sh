#!/bin/bash
# 2026-11-29 (fifth session) call 1: held-out batch 21 on first sight (the batch, no reading of it), then tcop's
# length-masked softmax (a length per batch and query) and Mirage's rope (the spec's grid follows WINDOW_SIZE)
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L
FRESH=1 WORK=/tmp/kt-b21 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh ${LIMIT:-400} --budget 20 --rounds 2 --time-budget 40 bench/corpus/fused_add_rms_norm/add_rms_norm_inplace_input_and_residual_8_per_thread_float4_register_arrays_block_by_hidden_thresholds_shfl_down_bf16_add_bf16_electrock_infer.cu bench/corpus/gated_act/glu_sigmoid_second_half_split_dim_inner_n_cuda_1d_kernel_loop_128_threads_double_reciprocal_f32_caffe2.cu bench/corpus/group_quant/nvfp4_fake_quant_amax_and_convert_block_16x4_cub_block_reduce_two_level_e4m3_scale_global_amax_bf16_modelopt.cu bench/corpus/layer_norm/layer_norm_bias_act_alpha_skip_16_per_thread_uint4_block_32_y_z_rows_smem_partials_d_div_sqrt_var_ep_fp16_lc0.cu bench/corpus/merge_attn_states/mla_combine_split_k_base2_lse_split_major_bf16_partials_grid_batch_seq_head_blocks_2_warps_per_head_vec8_modular_max.cu bench/corpus/rms_norm/rmsnorm_bf16x2_vectorized_block_half_hidden_warp_rounded_dyn_smem_warp_partials_extern_c_batch_seq_rows_bf16_kernel_skill.cu bench/corpus/rotary/rope_apply_3d_fhw_grid_sizes_complex_f64_freqs_split_passthrough_tail_block_per_token_sample_bf16_in_f32_out_wan.cu bench/corpus/rotary/rope_qk_real_per_head_learned_freqs_cos_sin_n_h_half_gptj_bf162_pairs_flat_512_out_of_place_bf16_mochi.cu bench/corpus/softmax/columnwise_softmax_col_major_block_per_column_512_threads_unrolled_smem_tree_exp_minus_log_sum_f32_cntk.cu bench/corpus/softmax/softprob_transform_thread_per_row_subspan_gridstride_256_double_wsum_inplace_f32_xgboost.cu  > /dev/null
rm -f $OUT/bench/bench_plot.png
mv $OUT/bench $OUT/b21
grep -A14 "## Per kernel" $OUT/b21/bench_results.md
FRESH=1 WORK=/tmp/kt-fix GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 120 --budget 20 --rounds 2 --time-budget 40 bench/corpus/softmax/masked_softmax_length_mask_warp_per_row_grid_b_h_q_scale_on_input_f32_tcop.cu bench/corpus/rotary/rotary_window_tokens_heads_element_per_thread_neox_full_width_cos_sin_rows_barrier_between_read_and_write_inplace_bf16_mirage_mpk.cu > /dev/null
rm -f $OUT/bench/bench_plot.png $OUT/bench/results.sqlite
mv $OUT/bench $OUT/fix
grep -A6 "## Per kernel" $OUT/fix/bench_results.md
echo "rc $?"
