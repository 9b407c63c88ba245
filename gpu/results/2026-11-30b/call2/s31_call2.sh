#!/bin/bash
# 2026-11-30 (second session) call 2: eight more older variants (random.Random(20261218).sample of the held-out variants of batches 1-24 of expert families not sampled since 2026-11-29d)
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L
FRESH=1 WORK=/tmp/kt-o18 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 200 --budget 20 --rounds 2 --time-budget 40 bench/corpus/rotary/rotary_pos_half_tile_shfl_partner_kv_cache_bf16.cu bench/corpus/fused_add_rms_norm/add_res_pre_layernorm_t5_style_residual_reread_clamp_inf_block_n_or_1024_bf16_ksanallm.cu bench/corpus/merge_attn_states/pa_sdpa_finalization_partitions_256_subgroup16_shuffles_global_memory_version_work_item_per_head_element_grid_seq_heads_past_lens_short_path_fp16_openvino.cu bench/corpus/group_quant/quant_per_block_int8_fuse_sub_mean_k_nhd_strides_grid_blocks_heads_batch_bf16_sageattention.cu bench/corpus/fused_add_rms_norm/fused_add_rms_norm_static_fp8_quant_bf16.cu bench/corpus/softmax/attn_softmax_block_per_head_warp_size_block_max_seq_len_rows_inplace_f32_yalm.cu bench/corpus/layer_norm/add_bias_layer_norm_inplace_sum_sumsq_while_f32_turbo.cu bench/corpus/softmax/softmax_channel_nchw_csr_stream_pixels_per_workgroup_lds_values_half_math_fp16_miopen.cu  > /dev/null
rm -f $OUT/bench/bench_plot.png $OUT/bench/results.sqlite; mv $OUT/bench $OUT/old18
grep -A12 "## Per kernel" $OUT/old18/bench_results.md
echo done
