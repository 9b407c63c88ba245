#!/bin/bash
# 2026-11-29 (fourth session) call 5: llama2.cu's rope with seeds 0 and 1 (the other templates' dispatch where the
# structural winner is faster everywhere too), stores kept; then eight more variants of batches 1-19 at random
# (random.Random(20261202).sample of those not in call 2's sample)
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L
L=bench/corpus/rotary/rope_rotation_thread_per_pair_powf_theta_gptj_q_and_k_below_kv_dim_prompt_tokens_grid_y_inplace_f32_llama2_cu.cu
for seed in 0 1; do
  FRESH=1 WORK=/tmp/kt-l$seed GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 90 --budget 20 --rounds 2 --time-budget 40 --seed $seed $L > /dev/null
  mkdir -p $OUT/llama2_s$seed && cp $OUT/bench/results.sqlite $OUT/bench/bench.log $OUT/llama2_s$seed/ && rm -rf $OUT/bench
  grep -h "RoPe_rotation_kernel: \(per-shape\|one config\|1\.\)" $OUT/llama2_s$seed/bench.log
done
FRESH=1 WORK=/tmp/kt-old2 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh ${LIMIT:-300} --budget 20 --rounds 2 --time-budget 40 \
  bench/corpus/fused_add_rms_norm/fused_add_rms_norm_packed_vec_width_bf16.cu bench/corpus/layer_norm/layer_norm_two_pass_optional_affine_f32.cu bench/corpus/softmax/softmax_last_dim_warp_ydim_half_math_f16_candle.cu bench/corpus/gated_act/geglu_erf_split_f32.cu bench/corpus/rms_norm/t5norm_item_per_thread_half2_chunks_fp16_eet.cu bench/corpus/softmax/masked_softmax_length_mask_warp_per_row_grid_b_h_q_scale_on_input_f32_tcop.cu bench/corpus/rms_norm/rmsnorm_block_cub_heads_strided_x_w_first_f32_weight_infinicore.cu bench/corpus/merge_attn_states/update_out_and_lse_block_per_row_head_grid_y_f32_out_bshd_transposed_block_lse_bhs_log1p_exp_inplace_bf16_ringflashattn.cu > /dev/null
rm -f $OUT/bench/bench_plot.png $OUT/bench/results.sqlite
mv $OUT/bench $OUT/old2
grep -A12 "## Per kernel" $OUT/old2/bench_results.md
echo "rc $?"
