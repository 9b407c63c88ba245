#!/bin/bash
# 2026-11-29 (seventh session) call 2: batch 26 on first sight; EDDL's softmax after the index-walk reading; the older
# variant call 1 left past its limit and four more (random.Random(20261209).sample of those not sampled before)
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L
B26=$(python3 - <<'PY'
import tomllib
v = tomllib.load(open("bench/corpus/corpus.toml", "rb"))["variant"]
print(" ".join("bench/corpus/" + x["file"] for x in v if "batch 26," in x["style"]))
PY
)
echo $B26 | wc -w
FRESH=1 WORK=/tmp/kt-b26 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 330 --budget 20 --rounds 2 --time-budget 40 $B26 bench/corpus/softmax/full_softmax_nd_thread_per_sample_inner_stride_inclusive_k_stride_eps_in_denominator_stable_flag_max_tpb_1024_f32_eddl.cu > /dev/null
rm -f $OUT/bench/bench_plot.png; mv $OUT/bench $OUT/b26
grep -A16 "## Per kernel" $OUT/b26/bench_results.md
FRESH=1 WORK=/tmp/kt-old9 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 180 --budget 20 --rounds 2 --time-budget 40 bench/corpus/gated_act/gelu_tanh_and_mul_vec16.cu bench/corpus/layer_norm/layer_norm_half_warp_rows_registers_fp16.cu bench/corpus/merge_attn_states/merge_attn_states_persistent_warp_uint4_bf16.cu bench/corpus/rms_norm/gemma_rms_norm_one_plus_w_bf16.cu bench/corpus/rotary/rope_neox_flat_index_fp16.cu > /dev/null
rm -f $OUT/bench/bench_plot.png $OUT/bench/results.sqlite; mv $OUT/bench $OUT/old9
grep -A8 "## Per kernel" $OUT/old9/bench_results.md
echo done
