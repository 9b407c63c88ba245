#!/bin/bash
# 2026-11-29 (sixth session) call 5: batch 24 on first sight; six more older variants
# (random.Random(20261207).sample of those not sampled before)
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L
B24=$(python3 - <<'PY'
import tomllib
v = tomllib.load(open("bench/corpus/corpus.toml", "rb"))["variant"]
print(" ".join("bench/corpus/" + x["file"] for x in v if "batch 24," in x["style"]))
PY
)
echo $B24 | wc -w
FRESH=1 WORK=/tmp/kt-b24 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 290 --budget 20 --rounds 2 --time-budget 40 $B24 > /dev/null
rm -f $OUT/bench/bench_plot.png; mv $OUT/bench $OUT/b24
grep -A14 "## Per kernel" $OUT/b24/bench_results.md
FRESH=1 WORK=/tmp/kt-old7 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 150 --budget 20 --rounds 2 --time-budget 40 bench/corpus/softmax/softmax_thread_per_row_groups_offsets_stride_temperature_cuda_gridsize_f32_darknet.cu bench/corpus/gated_act/silu_mul_inplace_separate_up_block2d_half2.cu bench/corpus/rotary/rotary_pos_emb_thread_per_token_head_major_rotate_half_local_buffers_hfma_inplace_fp16_tinychatengine.cu bench/corpus/gated_act/dequant_silu_and_mul_quant_int32_gemm_out_tmp_buffer_per_token_int8_qserve.cu bench/corpus/softmax/softmax_inplace_scale_butterfly_fp16.cu bench/corpus/rotary/rope_fortran_2_by_m_by_n_pairs_flat_index_sin_cos_tables_bf16_math_out_of_place_nntile.cu > /dev/null
rm -f $OUT/bench/bench_plot.png $OUT/bench/results.sqlite; mv $OUT/bench $OUT/old7
grep -A10 "## Per kernel" $OUT/old7/bench_results.md
echo done
