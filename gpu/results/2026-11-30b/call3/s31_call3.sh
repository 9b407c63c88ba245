#!/bin/bash
# 2026-11-30 (second session) call 3: Helion's rope after the head-major reading, tt-metal's RMSNorm after the dispatch's
# float-scalar fix; the bench suite in one run with this code
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L
FRESH=1 WORK=/tmp/kt-c3 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 150 --budget 20 --rounds 2 --time-budget 40 bench/corpus/rotary/rope_fwd_triton_port_bhsd_q_and_k_gqa_head_counts_hf_cos_sin_b_s_d_both_halves_read_tile_1_batch_16_tokens_all_heads_per_program_flat_pid_out_of_place_fp16_helion.cu bench/corpus/fused_add_rms_norm/rms_norm_fuse_pre_add_tilized_32x32_tiles_16x16_faces_tile_rows_split_over_8x8_core_grid_two_groups_bf16_packed_intermediates_reduce_scaler_winv_sqrt_recip_gamma_row_bcast_normed_only_bf16_tt_metal.cu > /dev/null
rm -f $OUT/bench/bench_plot.png $OUT/bench/results.sqlite; mv $OUT/bench $OUT/c3
grep -A6 "## Per kernel" $OUT/c3/bench_results.md
FRESH=1 WORK=/tmp/kt-suite GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 360 --budget 30 --rounds 3 > /dev/null
rm -f $OUT/bench/bench_plot.png; mv $OUT/bench $OUT/suite
grep -A14 "## Per kernel" $OUT/suite/bench_results.md
grep -B2 -A12 "where the time went" $OUT/suite/bench.log | tail -16
echo done
