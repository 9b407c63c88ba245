#!/bin/bash
# 2026-11-28h call 5: batch 12's two kernels that call 4 stopped at a kerntune fault (ColossalAI's function-pointer
# template argument at setup; FlashAttention-2's wrapper signature), then the bench suite in one run with this
# session's code (the figure of record's options)
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L
FRESH=1 WORK=/tmp/kt-b12 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 150 --budget 20 --rounds 2 --time-budget 45 \
  bench/corpus/gated_act/act_and_mul_stacked_first_dim_halves_gridstride_bf16_colossalai.cu \
  bench/corpus/merge_attn_states/splitkv_combine_split_major_oaccum_slse_transpose_unpadded_lse_bf16_fa2.cu
mkdir -p $OUT/b12 && mv $OUT/bench $OUT/b12/
FRESH=1 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 300 --budget 30 --rounds 3
mkdir -p $OUT/suite && mv $OUT/bench $OUT/suite/
echo "rc $?"
