#!/bin/bash
# 2026-11-29 (sixth session) call 6: DeepEP's fp8 dispatch cast after its reading (a helper template read as the
# instance its call names; the maximum started at its floor)
set -o pipefail
export OUT=${OUT:-/tmp/out}
FRESH=1 WORK=/tmp/kt-deepep GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 100 --budget 20 --rounds 2 --time-budget 40 bench/corpus/group_quant/ll_dispatch_fp8_cast_per_128_channels_int4_reads_half_warp_amax_margin_1e4_persistent_tokens_per_sm_last_warp_idle_ue8m0_option_bf16_deepep.cu > /dev/null
rm -f $OUT/bench/bench_plot.png; mv $OUT/bench $OUT/deepep
grep -A4 "## Per kernel" $OUT/deepep/bench_results.md
grep "verified on\|failed (" $OUT/deepep/bench.log | cut -c1-220 | head -4
