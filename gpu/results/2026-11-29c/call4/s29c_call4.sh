#!/bin/bash
# 2026-11-29 (third session) call 4: kernels whose bindings now hold a run-time flag at the spec's value (the wrapper
# traps on another; 6485ef8, 7be6894): each still verifies and tunes as before (code 4a673c1)
set -o pipefail
export OUT=${OUT:-/tmp/out}
FRESH=1 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh ${LIMIT:-400} --budget 20 --rounds 2 --time-budget 40 \
  bench/corpus/layer_norm/cu_layernorm_forward_batch_n_m_normalize_dim1_transpose_reduce_rd_mean_fp16_cpm_kernels.cu \
  bench/corpus/merge_attn_states/splitkv_combine_split_major_oaccum_slse_transpose_unpadded_lse_bf16_fa2.cu \
  bench/corpus/rms_norm/rms_norm_cub512_use_residual_flag_f32.cu \
  bench/corpus/rms_norm/rms_norm_void_ptr_fp32_residual_in_blocks_per_warp_fnptr_fp16_exl2.cu \
  bench/corpus/rms_norm/rmsnorm_fwd_warp_rows_rsigma_zero_centered_bf16.cu \
  bench/corpus/rotary/rope_past_lens_matrix_view_half2_hfma2_inplace_fp16_exl2.cu \
  bench/corpus/softmax/attention_softmax_mask_index_unidirectional_fp16.cu
echo "rc $?"
