#!/bin/bash
# 2026-11-29 (sixth session) call 2: batch 23 on first sight; the channel softmax's row path with its chunks kept
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L
B23=$(python3 - <<'PY'
import tomllib
v = tomllib.load(open("bench/corpus/corpus.toml", "rb"))["variant"]
print(" ".join("bench/corpus/" + x["file"] for x in v if "batch 23," in x["style"]))
PY
)
echo $B23 | wc -w
FRESH=1 WORK=/tmp/kt-b23 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 420 --budget 20 --rounds 2 --time-budget 40 $B23 > /dev/null
rm -f $OUT/bench/bench_plot.png; mv $OUT/bench $OUT/b23
grep -A14 "## Per kernel" $OUT/b23/bench_results.md
FRESH=1 WORK=/tmp/kt-ch GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 100 --budget 20 --rounds 2 --time-budget 40 bench/corpus/softmax/softmax_axis_size0_size1_size2_thread_per_outer_inner_kernel_loop_512_exp_stored_in_y_then_divided_fp16_nnabla.cu bench/corpus/softmax/channel_softmax_thread_per_outer_inner_position_caffe_kernel_loop_512_channel_stride_spatial_dim_f32_caffe.cu > /dev/null
rm -f $OUT/bench/bench_plot.png; mv $OUT/bench $OUT/channels2
grep -A6 "## Per kernel" $OUT/channels2/bench_results.md
echo done
