#!/bin/bash
# 2026-11-29 (third session) call 5 (code d7f0d5b): batch 19 after its readings (rtp-llm's skip RMSNorm: half2 template
# arguments matched; haste's LayerNorm: statistics as a pair a row), then 10 variants of batches 1-17 drawn at random
# (random.Random(20261129).sample of the 199 family variants of those batches): the whole corpus's verify rate, sampled
set -o pipefail
export OUT=${OUT:-/tmp/out}
FRESH=1 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh ${LIMIT:-540} --budget 20 --rounds 2 --time-budget 40 \
  bench/corpus/fused_add_rms_norm/skip_rmsnorm_f16x2_tpb_hidden_div8_vpt4_copy16_skip_out_half2_add_host_switch_fp16_rtp_llm.cu \
  bench/corpus/layer_norm/layer_norm_rows_in_block_x_hidden_in_block_y_4x256_smem_tree_mean_invstd_cache_eps1e5_f32_haste.cu \
  bench/corpus/gated_act/swiglu_interleaved_bf16x2_moe.cu \
  bench/corpus/rotary/rope_freqs_cis_interleaved_bf16.cu \
  bench/corpus/gated_act/dequant_silu_and_mul_quant_int32_gemm_out_tmp_buffer_per_token_int8_qserve.cu \
  bench/corpus/softmax/masked_softmax_bool_key_mask_fp16.cu \
  bench/corpus/fused_add_rms_norm/add_rmsnorm_cg_residual_out_fp16.cu \
  bench/corpus/gated_act/silu_mul_inplace_separate_up_block2d_half2.cu \
  bench/corpus/merge_attn_states/merge_multi_chunks_md_bf16_math_paddlenlp.cu \
  bench/corpus/softmax/attention_softmax_mask_index_unidirectional_fp16.cu \
  bench/corpus/gated_act/swiglu_gate_up_tensors_fp32x4_reinterpret_first_warp_tail_flat_bf16_cute_kernels.cu \
  bench/corpus/softmax/softmax_reduce_block_per_row_cu1dblock_smem_tree_then_warp_matrixdim_strides_f32_kaldi.cu
echo "rc $?"
