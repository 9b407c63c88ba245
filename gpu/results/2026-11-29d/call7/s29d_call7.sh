#!/bin/bash
# 2026-11-29 (fourth session) call 7 (code 4484a28): held-out batch 20 in one run with the session's final code
set -o pipefail
export OUT=${OUT:-/tmp/out}
FRESH=1 WORK=/tmp/kt-c7 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh ${LIMIT:-330} --budget 20 --rounds 2 --time-budget 40 \
  bench/corpus/merge_attn_states/flash_decoding_reduce_splits_plus_residual_half_math_thread0_serial_max_sum_smem_weights_accumulate_into_zeroed_dst_grid_bs_nh_block_d_fp16_million.cu bench/corpus/rotary/rotary_window_tokens_heads_element_per_thread_neox_full_width_cos_sin_rows_barrier_between_read_and_write_inplace_bf16_mirage_mpk.cu bench/corpus/rotary/rope_rotation_thread_per_pair_powf_theta_gptj_q_and_k_below_kv_dim_prompt_tokens_grid_y_inplace_f32_llama2_cu.cu bench/corpus/group_quant/quantize_mx_innermost_shared_exp_xor_shuffle_tile32_bit_level_fake_quant_fp8_e4m3_flat_thread_per_element_f32_microxcaling.cu bench/corpus/softmax/softmax_warp_per_row_two_warps_per_block_y_ldg_load_xor_butterfly_inverted_norm_recompute_expf_f32_sputnik.cu bench/corpus/softmax/channel_softmax_thread_per_outer_inner_position_caffe_kernel_loop_512_channel_stride_spatial_dim_f32_caffe.cu bench/corpus/layer_norm/layer_norm_block_per_row_min_hidden_512_two_pass_var_plus_eps_saved_mean_var_half_io_fp16_hugectr.cu bench/corpus/rms_norm/rms_norm_f16x8_f32_flat_index_block_k_div_8_scalar_gain_float2_variance_macros_fp16_leetcuda.cu bench/corpus/fused_add_rms_norm/residual_add_rmsnorm_f32_act_f16_weight_shared_atomicadd_warp_partials_inplace_x_default_stream_rekygeorge_llama2cu.cu bench/corpus/gated_act/silu_mul_inplace_x1_separate_x3_grid3d_dim_seq_bs_256_threads_half_math_each_step_fp16_yohannxu_llama2cu.cu > /dev/null
rm -f $OUT/bench/bench_plot.png $OUT/bench/results.sqlite
grep -A14 "## Per kernel" $OUT/bench/bench_results.md
grep "geomean speedup\|where the time went" $OUT/bench/bench.log
echo "rc $?"
