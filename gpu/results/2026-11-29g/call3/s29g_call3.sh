#!/bin/bash
# 2026-11-29 (seventh session) call 3: batch 27 on first sight; lighttransport's rope after the rotary-width reading and
# the extern "C" helpers fix
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L
B27=$(python3 - <<'PY'
import tomllib
v = tomllib.load(open("bench/corpus/corpus.toml", "rb"))["variant"]
print(" ".join("bench/corpus/" + x["file"] for x in v if "batch 27," in x["style"]))
PY
)
echo $B27 | wc -w
FRESH=1 WORK=/tmp/kt-b27 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 380 --budget 20 --rounds 2 --time-budget 40 $B27 bench/corpus/rotary/rope_neox_f32_theta_powf_on_the_fly_partial_pair_offset_n_rope_pairs_grid_heads_tokens_block_half_dim_start_pos_extern_c_inplace_f32_lighttransport.cu > /dev/null
rm -f $OUT/bench/bench_plot.png; mv $OUT/bench $OUT/b27
grep -A16 "## Per kernel" $OUT/b27/bench_results.md
echo done
