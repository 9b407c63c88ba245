#!/bin/bash
# 2026-11-29 call 2: held-out batch 13 on first sight (commit 8b9e508: the code before any reading this batch asked for)
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L
FRESH=1 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh ${LIMIT:-560} --budget 20 --rounds 2 --time-budget 45 \
  bench/corpus/rms_norm/rmsnorm_forward_ln_parameters_warp_row_registers_invvar_bf16_unicore.cu \
  bench/corpus/fused_add_rms_norm/fused_add_bias_residual_rmsnorm_float4_block_hidden_div4_default_stream_f32_llm_engineering.cu \
  bench/corpus/layer_norm/cu_layernorm_forward_batch_n_m_normalize_dim1_transpose_reduce_rd_mean_fp16_cpm_kernels.cu \
  bench/corpus/group_quant/per_token_group_quant_fp8_cg_tile16_int4_vec_div_full_dense_params_bf16_eps.cu \
  bench/corpus/gated_act/swiglu_two_tensors_flat_smem_staged_128_threads_void_stream_f32_kuiper.cu \
  bench/corpus/softmax/attn_softmax_decode_pos_from_device_cub_block_1024_three_pass_fp16_llama_cu_awq.cu \
  bench/corpus/softmax/softmax_mask_bias_evoformer_warp_cols_per_thread_inplace_bf16_fastfold.cu \
  bench/corpus/merge_attn_states/merge_attn_with_softmax_max_sum_pairs_mla_chunked_prefill_uint4_bf16_trtllm.cu \
  bench/corpus/rotary/rotary_inv_freq_weight_block_per_token_q_then_k_loops_inplace_fp16_cpm_cu.cu \
  bench/corpus/rotary/rope_fanout_forks_workers_head_major_f32_cos_sin_rows_out_of_place_bf16_hogwild.cu
echo "rc $?"
