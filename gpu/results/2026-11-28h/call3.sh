#!/bin/bash
# 2026-11-28h call 3: the key-range softmax bindings with the batch count passed and the batches past 65535 folded
# into the grid's z (MXNet's 65536 one-row batches failed to launch in call 1), on the four kernels that get them
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L
FRESH=1 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh ${LIMIT:-400} --budget 20 --rounds 2 --time-budget 60 \
  bench/corpus/softmax/softmax_stride1_smem_rows_per_block_length_mask_fp16_mxnet.cu \
  bench/corpus/softmax/attention_softmax_mask_index_unidirectional_fp16.cu \
  tests/data/cu/styles/softmax_row_lengths_tail_zero_f32.cu \
  tests/data/cu/styles/softmax_valid_keys_per_sequence_bf16.cu
echo "rc $?"
