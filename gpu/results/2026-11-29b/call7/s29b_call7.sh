#!/bin/bash
# 2026-11-29 (second session) call 7: batch 17's SwiftTransformer SiLU-and-mul after the namespaced-enumerator fix
# (a7f409f), then the bench suite in one run with this session's code
set -o pipefail
export OUT=${OUT:-/tmp/out}
WORK=/tmp/kt-b17 FRESH=1 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 120 --budget 20 --rounds 2 --time-budget 40 \
  bench/corpus/gated_act/fused_activation_multiply_silu_two_inputs_half2_pairs_gridstride_half_math_fp16_swifttransformer.cu
echo "rc $?"
mkdir -p $OUT/b17 && mv $OUT/bench/* $OUT/b17/ && rmdir $OUT/bench
FRESH=1 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh ${LIMIT:-330} --budget 30 --rounds 3
echo "rc $?"
