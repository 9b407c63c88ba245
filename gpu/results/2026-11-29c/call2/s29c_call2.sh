#!/bin/bash
# 2026-11-29 (third session) call 2: batch 18 after this session's readings of it (grok-1's per-sequence offsets with
# computed angles, AITemplate's uninstantiated launcher, cunn's and MIOpen's channel softmax, llama3.cuda's in-place
# flat SwiGLU; code 37ecf0d), then the bench suite in one run with this session's code
set -o pipefail
export OUT=${OUT:-/tmp/out}
WORK=/tmp/kt-b18 FRESH=1 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh ${LIMIT1:-300} --budget 20 --rounds 2 --time-budget 40 \
  bench/corpus/rotary/rope_rotate_half_tiled_phase_per_batch_offset_flat_element_per_thread_bthd_out_of_place_bf16_grok1.cu \
  bench/corpus/softmax/softmax_stored_locally_multi_dim_k8_middle_warp_rows_block_32x4_float4_packs_static_k_fp16_aitemplate.cu \
  bench/corpus/softmax/softmax_update_output_block_per_pixel_grid_n_h_w_stride0_stride1_thread0_serial_reduce_f32_cunn.cu \
  bench/corpus/softmax/softmax_channel_nchw_csr_stream_pixels_per_workgroup_lds_values_half_math_fp16_miopen.cu \
  bench/corpus/gated_act/f_silu_elementwise_mul_w3_inplace_hb_hb2_flat_64_threads_divup_f32_llama3cuda.cu
echo "rc $?"
mkdir -p $OUT/b18 && mv $OUT/bench/* $OUT/b18/ && rmdir $OUT/bench
FRESH=1 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh ${LIMIT2:-280} --budget 30 --rounds 3
echo "rc $?"
