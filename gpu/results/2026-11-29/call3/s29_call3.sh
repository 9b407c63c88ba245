#!/bin/bash
# 2026-11-29 call 3: batch 13's variants that got readings this session (CPM.cu's inv_freq rotary, TensorRT-LLM's
# (max, sum) pair merge, LLM-engineering's bias after the residual store, FastFold's keep-mask fill + bias softmax, and
# llama_cu_awq's softmax, whose 3.33x was lost to the spent time budget), then the bench suite in one run
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L
WORK=/tmp/kt-b13 FRESH=1 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh ${LIMIT:-280} --budget 20 --rounds 2 --time-budget 45 \
  bench/corpus/rotary/rotary_inv_freq_weight_block_per_token_q_then_k_loops_inplace_fp16_cpm_cu.cu \
  bench/corpus/merge_attn_states/merge_attn_with_softmax_max_sum_pairs_mla_chunked_prefill_uint4_bf16_trtllm.cu \
  bench/corpus/fused_add_rms_norm/fused_add_bias_residual_rmsnorm_float4_block_hidden_div4_default_stream_f32_llm_engineering.cu \
  bench/corpus/softmax/softmax_mask_bias_evoformer_warp_cols_per_thread_inplace_bf16_fastfold.cu \
  bench/corpus/softmax/attn_softmax_decode_pos_from_device_cub_block_1024_three_pass_fp16_llama_cu_awq.cu
echo "rc $?"
mv $OUT/bench $OUT/b13
WORK=/tmp/kt-suite FRESH=1 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh ${LIMIT2:-290} --budget 30 --rounds 3
echo "rc $?"
mv $OUT/bench $OUT/suite
