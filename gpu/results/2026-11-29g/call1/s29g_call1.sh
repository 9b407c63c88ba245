#!/bin/bash
# 2026-11-29 (seventh session) call 1: batch 25 on first sight; LoongServe's rope after the vector-view and strided-rows
# readings; eight more older variants (random.Random(20261208).sample of those not sampled before, outside other/)
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L
B25=$(python3 - <<'PY'
import tomllib
v = tomllib.load(open("bench/corpus/corpus.toml", "rb"))["variant"]
print(" ".join("bench/corpus/" + x["file"] for x in v if "batch 25," in x["style"]))
PY
)
echo $B25 | wc -w
FRESH=1 WORK=/tmp/kt-b25 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 300 --budget 20 --rounds 2 --time-budget 40 $B25 bench/corpus/rotary/rotary_emb_neox_half2_pairs_hfma2_token_strides_grid_tokens_heads_block_head_dim_div4_per_token_cos_sin_inplace_default_stream_fp16_loongserve.cu > /dev/null
rm -f $OUT/bench/bench_plot.png; mv $OUT/bench $OUT/b25
grep -A16 "## Per kernel" $OUT/b25/bench_results.md
FRESH=1 WORK=/tmp/kt-old8 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 230 --budget 20 --rounds 2 --time-budget 40 bench/corpus/rms_norm/rms_norm_warp_per_row_fp16.cu bench/corpus/gated_act/swiglu_oai_clamp_f32_to_bf16_gridstride.cu bench/corpus/softmax/attn_softmax_add_decomposed_rel_pos_h_w_block_per_query_row_smem_row_f32_sam.cu bench/corpus/fused_add_rms_norm/fused_add_rms_norm_warp_rows_bf16.cu bench/corpus/rms_norm/rmsnorm_float4_pack8_tail_bf16.cu bench/corpus/layer_norm/skip_layer_norm_kvp_half_math_no_eps_fp16.cu bench/corpus/layer_norm/layer_norm_no_bias_f32_in_bf16_out.cu bench/corpus/gated_act/gelu_tanh_and_mul_vec16.cu > /dev/null
rm -f $OUT/bench/bench_plot.png $OUT/bench/results.sqlite; mv $OUT/bench $OUT/old8
grep -A10 "## Per kernel" $OUT/old8/bench_results.md
echo done
