#!/bin/bash
# 2026-11-29 (third session) call 3: held-out batch 19 on first sight (code 6a13499 + the batch: its 4 variants with a
# candidate of their family; the other 6 have none), Swin's window softmax after its reading (db16ec5), cunn's and
# MIOpen's channel softmax with VEC 4 as the expert's default (6a13499)
set -o pipefail
export OUT=${OUT:-/tmp/out}
FRESH=1 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh ${LIMIT:-420} --budget 20 --rounds 2 --time-budget 40 \
  bench/corpus/fused_add_rms_norm/skip_rmsnorm_f16x2_tpb_hidden_div8_vpt4_copy16_skip_out_half2_add_host_switch_fp16_rtp_llm.cu \
  bench/corpus/rotary/add_fused_qkv_bias_rope_base_smem_staged_neox_pairs_grid_token_head_uint32_half2_inplace_fp16_rtp_llm.cu \
  bench/corpus/gated_act/swiglu_first_half_gate_flat_thread_per_output_bf16_hexp_min_size_1024_threads_bf16_hetu.cu \
  bench/corpus/rms_norm/rmsnorm_block_per_token_1024_threads_smem_tree_config_hidden_constexpr_round_then_hmul_weight_default_stream_fp16_infengine.cu \
  bench/corpus/softmax/window_attention_softmax_rel_pos_bias_shift_mask_warp_per_row_4_rows_fp16_in_f32_out_swin.cu \
  bench/corpus/softmax/softmax_update_output_block_per_pixel_grid_n_h_w_stride0_stride1_thread0_serial_reduce_f32_cunn.cu \
  bench/corpus/softmax/softmax_channel_nchw_csr_stream_pixels_per_workgroup_lds_values_half_math_fp16_miopen.cu
echo "rc $?"
