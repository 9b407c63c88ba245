#!/bin/bash
# 2026-11-29 (sixth session) call 3: batch 23's changed variants after the session's readings (Meeex2's GeGLU, the
# channel softmaxes with RB rows a block at inner = 1: NiuTrans, nnabla, Caffe); eight more older variants
# (random.Random(20261205).sample of the held-out variants of batches 1-20 of expert families not sampled before)
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L
FRESH=1 WORK=/tmp/kt-fix GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 200 --budget 20 --rounds 2 --time-budget 40 bench/corpus/gated_act/geglu_quick_gelu_tanh_sigmoid_form_stacked_gate_value_halves_flat_thread_per_output_early_return_256_threads_f32_meeex2_cuda.cu bench/corpus/softmax/softmax_lead_dim_stride_blocks_columns_x_rows_y_block_32x8_shared_xmax_xsum_row0_serial_reduce_clamp_0_1_f32_niutrans.cu bench/corpus/softmax/softmax_axis_size0_size1_size2_thread_per_outer_inner_kernel_loop_512_exp_stored_in_y_then_divided_fp16_nnabla.cu bench/corpus/softmax/channel_softmax_thread_per_outer_inner_position_caffe_kernel_loop_512_channel_stride_spatial_dim_f32_caffe.cu > /dev/null
rm -f $OUT/bench/bench_plot.png; mv $OUT/bench $OUT/fix
grep -A8 "## Per kernel" $OUT/fix/bench_results.md
FRESH=1 WORK=/tmp/kt-old5 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 330 --budget 20 --rounds 2 --time-budget 40 bench/corpus/fused_add_rms_norm/bias_residual_rms_norm_array_vec_fp16.cu bench/corpus/rotary/rope_neox_grid_b_t_heads_half_head_threads_position_is_t_powf_fast_sincos_bf16_koifish.cu bench/corpus/fused_add_rms_norm/fused_add_rms_norm_dst_add_reread_template_block_256_or_1024_f32_ik_llama.cu bench/corpus/fused_add_rms_norm/fused_add_bias_residual_rmsnorm_float4_block_hidden_div4_default_stream_f32_llm_engineering.cu bench/corpus/rotary/rope_fanout_forks_workers_head_major_f32_cos_sin_rows_out_of_place_bf16_hogwild.cu bench/corpus/rotary/rotary_embedding_element_per_thread_theta_powf_grid_z_bf16_zhilight.cu bench/corpus/layer_norm/add_bias_input_layernorm_v2_ite4_half2_fp32_gamma_void_ptr_fixed_eps_fp16_bytetransformer.cu bench/corpus/gated_act/swiglu_gate_up_tensors_fp32x4_reinterpret_first_warp_tail_flat_bf16_cute_kernels.cu > /dev/null
rm -f $OUT/bench/bench_plot.png; mv $OUT/bench $OUT/old5
grep -A12 "## Per kernel" $OUT/old5/bench_results.md
echo done
