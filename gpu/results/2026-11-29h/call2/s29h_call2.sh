#!/bin/bash
# 2026-11-29 (eighth session) call 2: Kernel Tuner side by side again (row_sum and scale_rows, worker cold and warm)
# with NVRTC's pool off the CUDA JIT cache; batch 29 after its readings (SimpleLLMInference's rope, nano-vllm's add +
# RMSNorm, Composable Kernel's combine after the alias fix); the corpus kernels whose bindings changed this session
# (fast-intrinsic SiLU, the fp32 sum); six more older variants (random.Random(20261211).sample of the held-out
# variants of batches 1-24 of expert families not sampled since 2026-11-29d)
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/wheels-extra/*.whl || exit 1
mkdir -p $OUT/ktc
PYTHONUNBUFFERED=1 KERNTUNE_CACHE=/tmp/ktcache2 COLUMNS=160 timeout 170 python3 bench/kernel_tuner_compare.py --kernel examples/row_sum.cu:row_sum --kernel examples/scale_rows.cu:scale_rows --kt-strategies brute_force --kerntune-strategies exhaustive --worker both --json $OUT/ktc/ktc.json > $OUT/ktc/ktc.log 2>&1
grep "^kerntune exhaustive\|^Kernel Tuner brute\|over Kernel Tuner brute_force" $OUT/ktc/ktc.log | cut -c1-400
FRESH=1 WORK=/tmp/kt-c2 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 390 --budget 20 --rounds 2 --time-budget 40 \
 bench/corpus/rotary/rope_f32_block_per_head_half_head_threads_neox_halves_separate_sin_cos_cache_half_dim_rows_q_then_k_loop_grid_heads_tokens_gqa_k_guard_inplace_f32_simplellminference.cu \
 bench/corpus/fused_add_rms_norm/add_rms_forward_torch_compile_port_fp32_sum_unrounded_residual_out_rounded_rsqrt_scaled_rounded_then_bf16_weight_mul_row_per_block_rblock_4096_registers_8_warps_out_of_place_bf16_nano_vllm.cu \
 bench/corpus/merge_attn_states/fmha_fwd_splitkv_combine_tile_m16_n128_lse_acc_lds_max_splits_16_split_major_o_acc_f32_lse_out_natural_log_grid_tiles_nhead_batch_bshd_out_fp16_composable_kernel.cu \
 bench/corpus/fused_add_rms_norm/add_rmsnorm_sum_and_norm_outputs_smem_tree_block_256_extern_c_bf16_infernum.cu \
 bench/corpus/gated_act/mul_and_silu_rows2d.cu bench/corpus/gated_act/silu_and_mul_aligned_vector_grid2d_fp16.cu \
 bench/corpus/layer_norm/norm_layer_inplace_three_pass_eps1e12_f32_lightseq.cu bench/corpus/gated_act/bias_split_gelu_value_first_hhs_template_fp16.cu bench/corpus/fused_add_rms_norm/rmsnorm_residual_registers_elements_per_thread_16_contiguous_float4_out_of_place_residual_out_block_256_warp_sums_f32_zllm.cu bench/corpus/group_quant/fp8_quant_blockwise_flat_groups_warp_gridstride_f32_lmcache.cu bench/corpus/softmax/softmax_autoregressive_online_warp_reverse_bf16.cu bench/corpus/rotary/qk_rotary_positional_embedding_gptj_pairs_partial_rotary_full_width_sin_cos_per_batch_token_flat_work_item_per_pair_q_and_k_1024_bf16_itex.cu > /dev/null
rm -f $OUT/bench/bench_plot.png $OUT/bench/results.sqlite; mv $OUT/bench $OUT/c2
grep -A16 "## Per kernel" $OUT/c2/bench_results.md
echo done
