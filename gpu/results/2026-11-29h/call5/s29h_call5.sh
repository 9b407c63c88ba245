#!/bin/bash
# 2026-11-29 (eighth session) call 5: eight more older variants (random.Random(20261213).sample of the held-out
# variants of batches 1-24 of expert families not sampled since 2026-11-29d), with the final code
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L
FRESH=1 WORK=/tmp/kt-c5 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 300 --budget 20 --rounds 2 --time-budget 40 bench/corpus/layer_norm/fused_ln_row_groups_half_math_fp16.cu bench/corpus/layer_norm/warp_laynorm_kernel_32x32_warp_per_row_stride_axis_scale_size_bias_size_branches_mu_sigma2_shared_per_warp_fdividef_sqrt_f32_infinitensor.cu bench/corpus/softmax/softmax_inplace_grid_stride_rows_cub_block_128_max_sum_in_t_rounded_each_step_fp16_cubert.cu bench/corpus/rms_norm/rmsnorm_two_pass_algo_e8_float4_8_per_load_block_cols_div_8_round_32_shared_33_stride_default_stream_bf16_punica.cu bench/corpus/rms_norm/rms_norm_tvm_codegen_fixed_hidden_fp16.cu bench/corpus/rotary/rot_embed_cat_interleaved_sin_cos_concat_table_prefix_tokens_passthrough_qkv_bnthd_in_bhnd_out_grid_n_b_bf16_timm.cu bench/corpus/rms_norm/rms_norm_strided_input_bf16.cu bench/corpus/softmax/fused_scale_mask_softmax_warp_impl_load_store_functors_fp16_oneflow.cu > /dev/null
rm -f $OUT/bench/bench_plot.png $OUT/bench/results.sqlite; mv $OUT/bench $OUT/old13
grep -A12 "## Per kernel" $OUT/old13/bench_results.md
echo done
