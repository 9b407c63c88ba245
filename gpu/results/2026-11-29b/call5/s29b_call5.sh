#!/bin/bash
# 2026-11-29 (second session) call 5: batch 16 after this session's fixes and readings (code after the Chitu reading):
# the two variants the compile refused in call 4 (a type alias as a template argument; two instantiations and no
# template_args) and Chitu's strided-view RMSNorm
set -o pipefail
export OUT=${OUT:-/tmp/out}
FRESH=1 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh ${LIMIT:-300} --budget 20 --rounds 2 --time-budget 40 \
  bench/corpus/gated_act/swiglu_gate_up_tensors_fp32x4_reinterpret_first_warp_tail_flat_bf16_cute_kernels.cu \
  bench/corpus/rotary/rope_neox_grid_b_t_heads_half_head_threads_position_is_t_powf_fast_sincos_bf16_koifish.cu \
  bench/corpus/rms_norm/rms_norm_pow2_block_tree_smem_mean_before_reduce_row_stride_inout_bf16_chitu.cu
echo "rc $?"
