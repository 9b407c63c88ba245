#!/bin/bash
# 2026-11-29 (sixth session) call 1: copy bandwidth against size; the channel softmax's folded / row paths on the two
# corpus variants with inner = 1 size sets; lc0's LayerNorm and the bench softmax searched with a large budget
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L
mkdir -p $OUT/copy && timeout 60 python3 .gpu/g/copy_ceiling.py $OUT/copy/copy.json
FRESH=1 WORK=/tmp/kt-ch GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 120 --budget 20 --rounds 2 --time-budget 40 bench/corpus/softmax/softmax_axis_size0_size1_size2_thread_per_outer_inner_kernel_loop_512_exp_stored_in_y_then_divided_fp16_nnabla.cu bench/corpus/softmax/channel_softmax_thread_per_outer_inner_position_caffe_kernel_loop_512_channel_stride_spatial_dim_f32_caffe.cu > /dev/null
rm -f $OUT/bench/bench_plot.png; mv $OUT/bench $OUT/channels
grep -A6 "## Per kernel" $OUT/channels/bench_results.md
FRESH=1 WORK=/tmp/kt-big GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 340 --budget 120 --rounds 1 --time-budget 150 bench/corpus/layer_norm/layer_norm_bias_act_alpha_skip_16_per_thread_uint4_block_32_y_z_rows_smem_partials_d_div_sqrt_var_ep_fp16_lc0.cu bench/softmax.cu > /dev/null
rm -f $OUT/bench/bench_plot.png; mv $OUT/bench $OUT/big
grep -A6 "## Per kernel" $OUT/big/bench_results.md
echo done
