#!/bin/bash
# 2026-11-30 (second session) call 4: eight more older variants (random.Random(20261219).sample of the held-out variants
# of batches 1-24 of expert families not sampled since 2026-11-29d)
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L
FRESH=1 WORK=/tmp/kt-o19 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 400 --budget 20 --rounds 2 --time-budget 40 bench/corpus/rms_norm/rmsnorm_inner1_bf162_f32_weight_fastllm.cu bench/corpus/layer_norm/vectorized_layer_norm_welford_aligned_vec4_bf16.cu bench/corpus/softmax/softmax_update_output_block_per_pixel_grid_n_h_w_stride0_stride1_thread0_serial_reduce_f32_cunn.cu bench/corpus/rotary/rope_2d_image_cached_cos_sin_h_w_tables_grid_hwb_bshd_fp16_aiter.cu bench/corpus/softmax/convert_output_multiclass_softmax_class_major_thread_per_data_serial_f64_row_scratch_1024_threads_lightgbm.cu bench/corpus/rms_norm/rms_norm_pow2_block_tree_smem_mean_before_reduce_row_stride_inout_bf16_chitu.cu bench/corpus/rms_norm/llama_rmsnorm_thread_per_row_matrix3d_grid_16x16_f32_weight_fp16_tinychatengine.cu bench/corpus/layer_norm/layer_norm_rows_in_block_x_hidden_in_block_y_4x256_smem_tree_mean_invstd_cache_eps1e5_f32_haste.cu > /dev/null
rm -f $OUT/bench/bench_plot.png $OUT/bench/results.sqlite; mv $OUT/bench $OUT/old19
grep -A12 "## Per kernel" $OUT/old19/bench_results.md
echo done
