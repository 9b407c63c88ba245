#!/bin/bash
# 2026-11-29 (fourth session) call 3: llama2.cu's rope (batch 20) with the other templates' per-shape dispatch tried
# where the winner can only be one configuration (structural, written back whole), and Caffe's channel softmax;
# the store kept for a replay test
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L
FRESH=1 WORK=/tmp/kt-c3 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh ${LIMIT:-200} --budget 20 --rounds 2 --time-budget 40 \
  bench/corpus/rotary/rope_rotation_thread_per_pair_powf_theta_gptj_q_and_k_below_kv_dim_prompt_tokens_grid_y_inplace_f32_llama2_cu.cu \
  bench/corpus/softmax/channel_softmax_thread_per_outer_inner_position_caffe_kernel_loop_512_channel_stride_spatial_dim_f32_caffe.cu
rm -f $OUT/bench/bench_plot.png
echo "rc $?"
