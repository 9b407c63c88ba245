#!/bin/bash
# 2026-11-30 call 2: batch 31 after its readings (NeMo's GeGLU: a row length compiled in; libllm's rope: one cache as a
# cos and a sin table back to back; FlagAttention's combine: a best the file does not build with gives way), and
# eight older variants (random.Random(20261214).sample of the held-out variants of batches 1-24 of expert families
# not sampled since 2026-11-29d)
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L
R=$(ls bench/corpus/gated_act/*_nemo.cu bench/corpus/rotary/*_libllm.cu bench/corpus/merge_attn_states/*_flagattention.cu)
FRESH=1 WORK=/tmp/kt-c2 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 200 --budget 20 --rounds 2 --time-budget 40 $R > /dev/null
rm -f $OUT/bench/bench_plot.png $OUT/bench/results.sqlite; mv $OUT/bench $OUT/c2
grep -A8 "## Per kernel" $OUT/c2/bench_results.md
FRESH=1 WORK=/tmp/kt-o14 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 330 --budget 20 --rounds 2 --time-budget 40 bench/corpus/gated_act/f_silu_elementwise_mul_w3_inplace_hb_hb2_flat_64_threads_divup_f32_llama3cuda.cu bench/corpus/layer_norm/layer_norm_welford_warp_reduce_bf16_fp32_affine.cu bench/corpus/merge_attn_states/combine_max_sumexp_fp16.cu bench/corpus/fused_add_rms_norm/skip_rmsnorm_f16x2_tpb_hidden_div8_vpt4_copy16_skip_out_half2_add_host_switch_fp16_rtp_llm.cu bench/corpus/fused_add_rms_norm/layernorm_nobeta_addbias_full_residual_ite_registers_1024_threads_ldg_half_add_fp16_dashinfer.cu bench/corpus/group_quant/sym_quant_int4_row_scales_given_hdiv_half2int_rn_thread_per_packed_byte_2d_blocks_32x16_odd_cols_fp16_quarot.cu bench/corpus/group_quant/group_quant_fp8_ue8m0_packed_scales_bf16.cu bench/corpus/softmax/online_softmax_fused_chunk_max_temperature_bf16_to_f32.cu > /dev/null
rm -f $OUT/bench/bench_plot.png $OUT/bench/results.sqlite; mv $OUT/bench $OUT/old14
grep -A12 "## Per kernel" $OUT/old14/bench_results.md
echo done
