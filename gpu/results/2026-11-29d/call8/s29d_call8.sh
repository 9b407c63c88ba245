#!/bin/bash
# 2026-11-29 (fourth session) call 8 (code fa07f18): llama2.cu's rope with seeds 2-5, stores kept, for a recording of
# the branch where the whole-file winner alone is faster than the original everywhere
set -o pipefail
export OUT=${OUT:-/tmp/out}
L=bench/corpus/rotary/rope_rotation_thread_per_pair_powf_theta_gptj_q_and_k_below_kv_dim_prompt_tokens_grid_y_inplace_f32_llama2_cu.cu
for seed in 2 3 4 5; do
  FRESH=1 WORK=/tmp/kt-s$seed GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 70 --budget 20 --rounds 2 --time-budget 40 --seed $seed $L > /dev/null
  mkdir -p $OUT/s$seed && cp $OUT/bench/results.sqlite $OUT/bench/bench.log $OUT/s$seed/ && rm -rf $OUT/bench
  echo "seed $seed:"; grep -h "RoPe_rotation_kernel: \(one config\|per-shape dispatch of the other\|1\.[0-9]*x (\)" $OUT/s$seed/bench.log | cut -c1-200
done
echo "rc $?"
