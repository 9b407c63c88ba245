#!/bin/bash
# 2026-11-30 (second session) call 5: the row-tail group quant (Primus-Turbo, FastDeploy, the style kernel); eight more
# older variants (random.Random(20261220).sample of the held-out variants of batches 1-24 of expert families not
# sampled since 2026-11-29d)
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L
FRESH=1 WORK=/tmp/kt-c5 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 150 --budget 20 --rounds 2 --time-budget 40 bench/corpus/group_quant/quant_fp8_blockwise_triton_port_tile_128x128_per_cta_axis1_row_groups_of_128_amax_clamp_1e4_scale_fp8max_over_amax_clamp_inverse_scales_4_warps_bf16_primus_turbo.cu bench/corpus/group_quant/per_token_per_block_fp8_warp_per_128_group_ceil_tail_tokens_stride_grid_1056_bf16_fastdeploy.cu tests/data/cu/styles/per_token_group_fp8_partial_last_group_warp_per_group_grid_groups_tokens_bf16.cu > /dev/null
rm -f $OUT/bench/bench_plot.png $OUT/bench/results.sqlite; mv $OUT/bench $OUT/c5
grep -A6 "## Per kernel" $OUT/c5/bench_results.md
FRESH=1 WORK=/tmp/kt-o20 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 330 --budget 20 --rounds 2 --time-budget 40 bench/corpus/softmax/attn_softmax_decode_pos_from_device_cub_block_1024_three_pass_fp16_llama_cu_awq.cu bench/corpus/gated_act/act_mul_gelu_f32_in_half_out_float2_exl3.cu bench/corpus/rotary/rope_compute_float_halfmode_template_grid_head_seq_block_n_rot_half_n_past_powf_theta_scale_f32_inferllm.cu bench/corpus/gated_act/geglu_generic_activation_inplace_half2_bias.cu bench/corpus/layer_norm/layer_norm_fixed_block_dim_mean_var_fp16.cu bench/corpus/merge_attn_states/flash_decoding_combine_glse_fp16_base2_split_inner_layout_grid_heads_batch_128_threads_static_split8_dim128_tilelang.cu bench/corpus/rotary/rope_neox_grid_batch_seq_chunk_theta_powf_per_element_pos_ids_i64_half_math_refactorgraph.cu bench/corpus/softmax/softmax_extern_c_axis_middle_rank3_view_blocks_outer_x_inner_1024_threads_strided_axis_warp_then_smem_32_exp_stored_then_scaled_f32_tract.cu  > /dev/null
rm -f $OUT/bench/bench_plot.png $OUT/bench/results.sqlite; mv $OUT/bench $OUT/old20
grep -A12 "## Per kernel" $OUT/old20/bench_results.md
echo done
