#!/bin/bash
# 2026-11-30 call 5: eight more older variants (random.Random(20261217).sample of the held-out variants of batches 1-24
# of expert families not sampled since 2026-11-29d)
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L
FRESH=1 WORK=/tmp/kt-o17 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 300 --budget 20 --rounds 2 --time-budget 40 bench/corpus/gated_act/silu_and_mul_quant_fp8_split_rows_fp16.cu bench/corpus/softmax/softmax_warp_per_head_block_per_word_mask_bias_smem_row_head_major_inplace_fp16_bytetransformer.cu bench/corpus/rms_norm/rms_norm_dynamic_per_token_fp8_quant_bf16.cu bench/corpus/rms_norm/row_dim_bf16x8_rmsnorm_block_per_row_128_threads_scalar_packs_of_8_cub_block_reduce_shared_val_eps1e5_bf16_dango_infer.cu bench/corpus/fused_add_rms_norm/residual_rmsnorm_inplace_x_and_r_8_halves_per_thread_float4_half2_add_half_scaled_then_hmul2_weight_block_div_up_dim_8_warps_fp16_inficom.cu bench/corpus/merge_attn_states/merge_attn_with_softmax_max_sum_pairs_mla_chunked_prefill_uint4_bf16_trtllm.cu bench/corpus/rms_norm/rmsnorm_fwd_warp_rows_rsigma_zero_centered_bf16.cu bench/corpus/group_quant/quantize_w4a4_act_int4_group64_tvec8_8_lanes_per_group_xor_shuffle_amax_transposed_scales_k64_m_flat_1024_bf16_nunchaku.cu > /dev/null
rm -f $OUT/bench/bench_plot.png $OUT/bench/results.sqlite; mv $OUT/bench $OUT/old17
grep -A12 "## Per kernel" $OUT/old17/bench_results.md
echo done
