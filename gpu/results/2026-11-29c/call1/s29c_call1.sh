#!/bin/bash
# 2026-11-29 (third session) call 1: held-out batch 18 on first sight (code 30eba06: the batch, no reading of it;
# only its 7 variants with a candidate of their family: the other 7 have none, so no expert can verify), then
# InferLLM's and Koifish's ropes and ByteTransformer's LayerNorm after this session's readings (6485ef8, 7be6894)
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L
FRESH=1 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh ${LIMIT:-570} --budget 20 --rounds 2 --time-budget 40 \
  bench/corpus/fused_add_rms_norm/add_res_pre_layernorm_t5_style_residual_reread_clamp_inf_block_n_or_1024_bf16_ksanallm.cu \
  bench/corpus/layer_norm/std_norm_block_128_shared_cache_serial_thread0_sum_sumsq_double_cast_mul_add_rows_grid_y_fp16_inferflow.cu \
  bench/corpus/softmax/softmax_stored_locally_multi_dim_k8_middle_warp_rows_block_32x4_float4_packs_static_k_fp16_aitemplate.cu \
  bench/corpus/rotary/rope_rotate_half_tiled_phase_per_batch_offset_flat_element_per_thread_bthd_out_of_place_bf16_grok1.cu \
  bench/corpus/softmax/softmax_channel_nchw_csr_stream_pixels_per_workgroup_lds_values_half_math_fp16_miopen.cu \
  bench/corpus/softmax/softmax_update_output_block_per_pixel_grid_n_h_w_stride0_stride1_thread0_serial_reduce_f32_cunn.cu \
  bench/corpus/softmax/softmax_with_bias_fixed_shared_rows_gridstride_elem_strides_byte_offsets_inline_reduce_half_io_fp16_theano.cu \
  bench/corpus/rotary/rope_compute_float_halfmode_template_grid_head_seq_block_n_rot_half_n_past_powf_theta_scale_f32_inferllm.cu \
  bench/corpus/rotary/rope_neox_grid_b_t_heads_half_head_threads_position_is_t_powf_fast_sincos_bf16_koifish.cu \
  bench/corpus/layer_norm/add_bias_input_layernorm_v2_ite4_half2_fp32_gamma_void_ptr_fixed_eps_fp16_bytetransformer.cu
echo "rc $?"
