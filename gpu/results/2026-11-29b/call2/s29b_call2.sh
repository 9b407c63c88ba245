#!/bin/bash
# 2026-11-29 (second session) call 2: the masked softmaxes whose rows are now a product of arguments, with the
# packed-row starting points (code 0b9abd9)
set -o pipefail
export OUT=${OUT:-/tmp/out}
FRESH=1 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh ${LIMIT:-400} --budget 20 --rounds 2 --time-budget 40 \
  bench/corpus/softmax/masked_softmax_bool_key_mask_fp16.cu \
  bench/corpus/softmax/scaled_causal_masked_softmax_warp_fp16.cu \
  bench/corpus/softmax/softmax_extended_mask_4d_bf16.cu \
  bench/corpus/softmax/masked_softmax_alibi_fp32_in_fp16_out.cu \
  bench/corpus/softmax/softmax_scale_key_padding_mask_f32.cu
echo "rc $?"
