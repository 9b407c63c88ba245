#!/bin/bash
# 2026-11-29 (fifth session) call 2: Caffe2's GLU after its reading (the sigmoid GLU), eight older variants at random
# (random.Random(20261203).sample of the held-out variants of batches 1-20 of expert families, less the 16 sampled in
# 2026-11-29d), then the bench suite in one run with this session's code
set -o pipefail
export OUT=${OUT:-/tmp/out}
nvidia-smi -L
FRESH=1 WORK=/tmp/kt-old3 GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh ${LIMIT:-260} --budget 20 --rounds 2 --time-budget 40 bench/corpus/gated_act/glu_sigmoid_second_half_split_dim_inner_n_cuda_1d_kernel_loop_128_threads_double_reciprocal_f32_caffe2.cu bench/corpus/fused_add_rms_norm/skip_rms_norm_block_smem_half_skip_load_affine_store_oneflow.cu bench/corpus/gated_act/gate_fuse_runtime_act_type_grid_z_columns_bf16_zhilight.cu bench/corpus/layer_norm/lnormalization_row_blocks_loop_odd_tree_divide_sigma_f32_marian.cu bench/corpus/group_quant/group_quant_fp8_block_per_group_cub_bf16.cu bench/corpus/rotary/rope_mla_gptj_strided_kpe_gridstride_bf16.cu bench/corpus/rms_norm/rms_norm_cub512_use_residual_flag_f32.cu bench/corpus/softmax/softmax_stored_locally_multi_dim_k8_middle_warp_rows_block_32x4_float4_packs_static_k_fp16_aitemplate.cu bench/corpus/rms_norm/rmsnorm_forward_ln_parameters_warp_row_registers_invvar_bf16_unicore.cu > /dev/null
rm -f $OUT/bench/bench_plot.png $OUT/bench/results.sqlite
mv $OUT/bench $OUT/old3
grep -A12 "## Per kernel" $OUT/old3/bench_results.md
FRESH=1 WORK=/tmp/kt-suite GPU_SETUP=.gpu/benchw/gpu-setup.sh bash gpu/run_bench.sh 300 --budget 30 --rounds 3 > /dev/null
rm -f $OUT/bench/bench_plot.png
mv $OUT/bench $OUT/suite
grep -B2 -A14 "## Per kernel" $OUT/suite/bench_results.md
echo "rc $?"
