#!/bin/bash
# 2026-11-29 (seventh session) call 6: batch 28 on first sight; espnet-trt's LayerNorm (batch 27) after the
# constant-row-width reading
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L
B28=$(python3 - <<'PY'
import tomllib
v = tomllib.load(open("bench/corpus/corpus.toml", "rb"))["variant"]
print(" ".join("bench/corpus/" + x["file"] for x in v if "batch 28," in x["style"]))
PY
)
echo $B28 | wc -w
FRESH=1 WORK=/tmp/kt-b28 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 230 --budget 20 --rounds 2 --time-budget 40 bench/corpus/layer_norm/layer_norm_trt_plugin_no_affine_template_n_192_one_value_per_thread_block_n_cub_block_reduce_mean_then_centered_var_shared_mean_var_rsqrtf_f32_espnet_trt.cu $B28 > /dev/null
rm -f $OUT/bench/bench_plot.png $OUT/bench/results.sqlite; mv $OUT/bench $OUT/b28
grep -A14 "## Per kernel" $OUT/b28/bench_results.md
echo done
