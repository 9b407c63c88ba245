#!/bin/bash
# 2026-11-30 (second session) call 7: FlexGen's 4-bit compress (batch 34) after the long-name fix; eight more older
# variants (random.Random(20261221).sample of the held-out variants of batches 1-24 of expert families not sampled since
# 2026-11-29d)
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L
FRESH=1 WORK=/tmp/kt-o21 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 300 --budget 20 --rounds 2 --time-budget 40 bench/corpus/group_quant/compress_group_wise_asym_4bit_min_max_inverse_scale_reciprocal_times_15_fp16_tensor_ops_round_half_even_zero_padded_tail_group_pairs_high_nibble_first_scale_mn_planes_any_group_dim_thread_per_group_flat_256_fp16_flexgen.cu bench/corpus/fused_add_rms_norm/residual_rms_norm_x_out_rms_y_outputs_half_flexflow.cu bench/corpus/fused_add_rms_norm/rms_norm_residual_unrounded_sumsq_bf16_scalellm.cu bench/corpus/rotary/rope_candle_bhtd_extern_c_bf16.cu bench/corpus/softmax/self_attn_softmax_causal_right_padding_len_inplace_block_per_head_loop_rows_fp16_eet.cu bench/corpus/softmax/softmax_with_bias_fixed_shared_rows_gridstride_elem_strides_byte_offsets_inline_reduce_half_io_fp16_theano.cu bench/corpus/layer_norm/layer_norm_double_sum_sumsq_shfl_down_width_steps_128_threads_f32_affine_f32_tnn.cu bench/corpus/layer_norm/layer_norm_plugin_vpt_4_contiguous_registers_cub_block_reduce_256_two_pass_mean_inv_std_shared_half_fp16_tensorrtx.cu bench/corpus/group_quant/group_quant_asym_uint8_minmax_zero_bf16.cu  > /dev/null
rm -f $OUT/bench/bench_plot.png $OUT/bench/results.sqlite; mv $OUT/bench $OUT/old21
grep -A12 "## Per kernel" $OUT/old21/bench_results.md
echo done
