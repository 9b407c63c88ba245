#!/bin/bash
# 2026-11-29 (seventh session) call 5: Eole's GELU-and-mul after the dispatch's refusal fix (its run had ended in an
# error after its rounds); four more older variants (random.Random(20261210).sample of those not sampled before)
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L
FRESH=1 WORK=/tmp/kt-c5 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 200 --budget 20 --rounds 2 --time-budget 40 bench/corpus/gated_act/gelu_erf_and_mul_gate_first_halves_token_per_block_int4_fast_path_runtime_alignment_check_scalar_fallback_half_ops_min_d_1024_fp16_eole.cu bench/corpus/rotary/rope_rotate_half_full_precision_head_major_q_tail_positions_k_all_grid_t_h_b_out_of_place_bf16_olmo.cu bench/corpus/layer_norm/layer_norm_sum_sq_bf16.cu bench/corpus/rotary/fused_rope_sbhd_freqs_sincos_smem_strided_bf16.cu bench/corpus/rms_norm/t5_layer_norm_clamp_inf_half_block_halved_fp16.cu > /dev/null
rm -f $OUT/bench/bench_plot.png $OUT/bench/results.sqlite; mv $OUT/bench $OUT/c5
grep -A8 "## Per kernel" $OUT/c5/bench_results.md
echo done
