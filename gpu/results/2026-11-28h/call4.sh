#!/bin/bash
# 2026-11-28h call 4: held-out batch 12 on the GPU, its nine family variants (first sight for five: the other four
# got their candidates from readings added this session after the batch was written) and its transpose
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L
FRESH=1 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh ${LIMIT:-540} --budget 20 --rounds 2 --time-budget 45 \
  bench/corpus/gated_act/act_and_mul_stacked_first_dim_halves_gridstride_bf16_colossalai.cu \
  bench/corpus/rms_norm/rms_norm_void_ptr_fp32_residual_in_blocks_per_warp_fnptr_fp16_exl2.cu \
  bench/corpus/fused_add_rms_norm/skip_rms_norm_block_smem_half_skip_load_affine_store_oneflow.cu \
  bench/corpus/layer_norm/lnormalization_row_blocks_loop_odd_tree_divide_sigma_f32_marian.cu \
  bench/corpus/softmax/gsoftmax_half_hexp_row_blocks_loop_odd_tree_fp16_marian.cu \
  bench/corpus/softmax/fused_scale_mask_softmax_warp_impl_load_store_functors_fp16_oneflow.cu \
  bench/corpus/merge_attn_states/splitkv_combine_split_major_oaccum_slse_transpose_unpadded_lse_bf16_fa2.cu \
  bench/corpus/rotary/rope_past_lens_matrix_view_half2_hfma2_inplace_fp16_exl2.cu \
  bench/corpus/group_quant/quant_symm_row_array_ldg_colmajor_aligned_scales_bf16_lmdeploy.cu \
  bench/corpus/other/swap_dim1_dim2_tensor3_smem_tiles_subtiles_fp16_tensorflow.cu
echo "rc $?"
