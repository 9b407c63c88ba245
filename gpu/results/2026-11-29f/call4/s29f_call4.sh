#!/bin/bash
# 2026-11-29 (sixth session) call 4: layer_norm expert variants timed on lc0's and ByteTransformer's bindings (launch
# bounds with a minimum of blocks, rows a block, WLOAD); batch 23 in one run with the session's code; eight more older
# variants (random.Random(20261206).sample of those not sampled before)
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L
mkdir -p $OUT/lnx && timeout 120 python3 .gpu/g/lnx/time_ln.py $OUT/lnx/lnx.json
B23=$(python3 - <<'PY'
import tomllib
v = tomllib.load(open("bench/corpus/corpus.toml", "rb"))["variant"]
print(" ".join("bench/corpus/" + x["file"] for x in v if "batch 23," in x["style"]))
PY
)
FRESH=1 WORK=/tmp/kt-b23 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 280 --budget 20 --rounds 2 --time-budget 40 $B23 > /dev/null
rm -f $OUT/bench/bench_plot.png; mv $OUT/bench $OUT/b23
grep -A14 "## Per kernel" $OUT/b23/bench_results.md
FRESH=1 WORK=/tmp/kt-old6 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 220 --budget 20 --rounds 2 --time-budget 40 bench/corpus/gated_act/gated_gelu_inplace_half2_fold_coeff_grid_fp16_eet.cu bench/corpus/merge_attn_states/merge_states_index_sets_base2_warp_fp16.cu bench/corpus/rms_norm/rms_norm_triton_port_pow2_registers_bf16.cu bench/corpus/rotary/add_fused_qkv_bias_rope_base_smem_staged_neox_pairs_grid_token_head_uint32_half2_inplace_fp16_rtp_llm.cu bench/corpus/rotary/rope_partial_fused_qkv_bf16.cu bench/corpus/merge_attn_states/flash_decode_stage2_seqlen_splits_fp16.cu bench/corpus/fused_add_rms_norm/general_rms_norm_residual_trtllm_bf16.cu bench/corpus/softmax/gsoftmax_half_hexp_row_blocks_loop_odd_tree_fp16_marian.cu > /dev/null
rm -f $OUT/bench/bench_plot.png; mv $OUT/bench $OUT/old6
grep -A12 "## Per kernel" $OUT/old6/bench_results.md
echo done
