#!/bin/bash
# 2026-11-29 (fifth session) call 5: eight more older variants at random with the final code
# (random.Random(20261204).sample of the held-out variants of batches 1-20 of expert families not sampled before),
# then Kernel Tuner side by side on row_sum and scale_rows (worker cold and warm)
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L
FRESH=1 WORK=/tmp/kt-old4 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh ${LIMIT:-260} --budget 20 --rounds 2 --time-budget 40 bench/corpus/layer_norm/layer_norm_nc_single_pass_sum_sumsq_ehalf4_float4_gain_threads_template_mean_rstd_out_fp16_blocksparse.cu bench/corpus/gated_act/silu_and_mul_half2_math_fp16.cu bench/corpus/gated_act/swiglu_two_tensors_flat_smem_staged_128_threads_void_stream_f32_kuiper.cu bench/corpus/fused_add_rms_norm/add_rmsnorm_cg_residual_out_fp16.cu bench/corpus/merge_attn_states/combine_fp32_partials_bf16_out.cu bench/corpus/softmax/attention_softmax_mask_index_unidirectional_fp16.cu bench/corpus/fused_add_rms_norm/fused_add_rms_layernorm_unroll_half2_registers_fp16.cu bench/corpus/group_quant/groupwise_affine_int4_float_zero_bf16_op_rounding_i32_values_tinygemm_scales_and_zeros_gnk2_warp_per_group_torchao.cu > /dev/null
rm -f $OUT/bench/bench_plot.png $OUT/bench/results.sqlite
mv $OUT/bench $OUT/old4
grep -A12 "## Per kernel" $OUT/old4/bench_results.md
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/wheels-extra/*.whl || exit 1
mkdir -p $OUT/ktc
PYTHONUNBUFFERED=1 KERNTUNE_CACHE=/tmp/ktcache2 COLUMNS=160 timeout 170 python3 bench/kernel_tuner_compare.py --kernel examples/row_sum.cu:row_sum --kernel examples/scale_rows.cu:scale_rows --kt-strategies brute_force --kerntune-strategies exhaustive --worker both --json $OUT/ktc/ktc.json > $OUT/ktc/ktc.log 2>&1
grep -A4 "evaluations per minute, kerntune" $OUT/ktc/ktc.log | head -20
echo "rc $?"
