#!/bin/bash
# 2026-11-29 (eighth session) call 3: web-rwkv's silu (batch 29) after the in-place-over-the-multiplied-operand
# reading; eight more older variants (random.Random(20261212).sample of the held-out variants of batches 1-24 of
# expert families not sampled since 2026-11-29d); then the bench suite in one run with this session's code
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L
FRESH=1 WORK=/tmp/kt-c3 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 250 --budget 20 --rounds 2 --time-budget 40 \
 bench/corpus/gated_act/silu_input_times_output_inplace_shape_c_t_b_grid_c_div_4_over_block_tokens_batch_vec4_packed_u32x2_f16_block_128_fp16_web_rwkv.cu \
 bench/corpus/group_quant/mxfp8_e8m0_floor_lane_per_element_bf16.cu bench/corpus/group_quant/quantize_blockwise_nf4_cub_load_store_fp16.cu bench/corpus/group_quant/quant_symm_row_array_ldg_colmajor_aligned_scales_bf16_lmdeploy.cu bench/corpus/gated_act/act_and_mul_stacked_first_dim_halves_gridstride_bf16_colossalai.cu bench/corpus/gated_act/silu_and_multiply_silu_on_right_half_left_half_multiplier_grid2d_block_16x16_row_col_thread_per_output_fp16_nanoflow.cu bench/corpus/rotary/rope_nthc_weights_tokens_channels_cos_half_sin_half_vcmul_byte_counts_block_per_batch_head_token_grid_tokens_heads_batch_out_of_place_f32_xnnpack.cu bench/corpus/rotary/rope_batched_seqlen_offsets_tiles_fp16.cu bench/corpus/merge_attn_states/mla_combine_cumulative_splits_base2_lse_warp_per_row_bf16_flashmla.cu > /dev/null
rm -f $OUT/bench/bench_plot.png $OUT/bench/results.sqlite; mv $OUT/bench $OUT/c3
grep -A12 "## Per kernel" $OUT/c3/bench_results.md
FRESH=1 WORK=/tmp/kt-suite GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 280 --budget 30 --rounds 3 > /dev/null
rm -f $OUT/bench/bench_plot.png; mv $OUT/bench $OUT/suite
grep -B2 -A14 "## Per kernel" $OUT/suite/bench_results.md | head -20
grep -A6 "geometric-mean speedup" $OUT/suite/bench_results.md | head -8
echo done
