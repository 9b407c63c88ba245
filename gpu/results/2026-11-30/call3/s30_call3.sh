#!/bin/bash
# 2026-11-30 call 3: sixteen more older variants (random.Random(20261215).sample, then random.Random(20261216).sample
# of the rest, of the held-out variants of batches 1-24 of expert families not sampled since 2026-11-29d)
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L
FRESH=1 WORK=/tmp/kt-o15 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 280 --budget 20 --rounds 2 --time-budget 40 bench/corpus/merge_attn_states/sdpa_vector_2pass_combine_32_blocks_base2_max_sum_unnormalized_cg_1024_threads_f32_to_bf16_mlx.cu bench/corpus/group_quant/block_quant_fp8_2d_128x128_tiles_bf16.cu bench/corpus/rotary/rope_fused_qkv_inplace_fp16.cu bench/corpus/layer_norm/std_norm_block_128_shared_cache_serial_thread0_sum_sumsq_double_cast_mul_add_rows_grid_y_fp16_inferflow.cu bench/corpus/rotary/rope_rotate_half_tiled_phase_per_batch_offset_flat_element_per_thread_bthd_out_of_place_bf16_grok1.cu bench/corpus/rotary/rotary_element_per_thread_sin_cos_tables_transposed_f32.cu bench/corpus/softmax/softmax_attention_sinks_cub_bf16.cu bench/corpus/merge_attn_states/merge_multi_chunks_md_bf16_math_paddlenlp.cu > /dev/null
rm -f $OUT/bench/bench_plot.png $OUT/bench/results.sqlite; mv $OUT/bench $OUT/old15
grep -A12 "## Per kernel" $OUT/old15/bench_results.md
FRESH=1 WORK=/tmp/kt-o16 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 280 --budget 20 --rounds 2 --time-budget 40 bench/corpus/gated_act/fused_activation_multiply_silu_two_inputs_half2_pairs_gridstride_half_math_fp16_swifttransformer.cu bench/corpus/rotary/rope_complex_mult_freqs_cis_float_pairs_start_pos_symbolic_half2_in_float2_table_half_out_grid_2_32_seqlen_local_32_generated_e_kernel_fp16_tinygrad.cu bench/corpus/layer_norm/add_bias_residual_pre_layer_norm_bf16.cu bench/corpus/softmax/log_softmax_online_md_cub_padded_vocab_bf16.cu bench/corpus/softmax/ctc_compute_probs_column_per_cta_reduce_rows_ctareduce_functors_truncate_flt_min_f32_warpctc.cu bench/corpus/rotary/rotate_sink_tiled_transposed_key_cache_layers_grid_y_exp2f_one_position_inplace_fp16_calm.cu bench/corpus/rotary/rope_sbhd_uncached_freqs_sincosf_reuse_front_part_partial_warp_by_heads_bf16_aiter.cu bench/corpus/group_quant/per_token_asym_int8_outlier_columns_gather_smem_minmax_tree_idle_blocks_fp16_quik.cu > /dev/null
rm -f $OUT/bench/bench_plot.png $OUT/bench/results.sqlite; mv $OUT/bench $OUT/old16
grep -A12 "## Per kernel" $OUT/old16/bench_results.md
echo done
