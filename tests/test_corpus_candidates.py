"""Every variant of the corpus of styles (bench/corpus/corpus.toml: `[[variant]] file, kernel, family`) whose
family kerntune has an expert for gets a candidate binding of that family, offline: what `kerntune show` lists
and the optimize loop screens before round 1. Variants of `other:*` families are not required to get one.
Skipped until the corpus exists in this checkout."""

import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "bench" / "corpus" / "corpus.toml"
# corpus family -> the expert families (templates/experts headers) that serve it
EXPERT_FAMILIES = {
    "gated_act": {"gated_activation"}, "rms_norm": {"rms_norm"}, "fused_add_rms_norm": {"fused_add_rms_norm"},
    "layer_norm": {"layer_norm"}, "softmax": {"softmax"}, "merge_attn_states": {"merge_attn_states"},
    "rotary": {"rotary_embedding"}, "group_quant": {"group_quant"},
}


# variants whose style no binder serves yet, each with why (strict: one that gets a candidate must leave this list)
KNOWN_GAPS: dict[str, str] = {  # batches 11 to 30's, on first sight (batches 9 and 10's closed; every variant of 1-8
    # gets one)
    "rms_norm/rmsnorm_block_cub_heads_strided_x_w_first_f32_weight_infinicore.cu":
        "InfiniCore rmsnormKernel: declared through a macro standing for __global__ (INFINIOP_CUDA_KERNEL) and doing "
        "its work in a __device__ rmsnormBlock it calls, over [batch, nhead, dim] rows addressed by stride arguments",
    "fused_add_rms_norm/residual_rms_norm_x_out_rms_y_outputs_half_flexflow.cu":
        "FlexFlow ResidualRMSNorm: four outputs, the per-row inverse rms (rounded to half) and the unweighted "
        "normalized rows written to their own buffers beside the residual sum, the output weighted from those rows",
    "merge_attn_states/mla_combine_cumulative_splits_base2_lse_warp_per_row_bf16_flashmla.cu":
        "FlashMLA combine: a batch's splits are the range [num_splits[b], num_splits[b + 1]) of a cumulative index "
        "into split-major rows shared by all batches, base-2 lse in and natural out, a one-split batch left untouched",
    # batch 12
    "fused_add_rms_norm/skip_rms_norm_block_smem_half_skip_load_affine_store_oneflow.cu":
        "OneFlow skip_rms_norm: the row normalized is x + bias + alpha * skip summed in half inside a load functor and "
        "never written back (the outputs are the weighted row and a per-row fp32 inv_rms), staged as float in dynamic "
        "shared memory by load / store functors rebuilt in the kernel from its unpacked arguments",
    "softmax/fused_scale_mask_softmax_warp_impl_load_store_functors_fp16_oneflow.cu":
        "OneFlow SoftmaxWarpImpl: load and store are template functors rebuilt in the kernel from unpacked fields (the "
        "load applying mask ? x * scale : fill from a bool mask), the row held in a [rows_per_access][cols_per_thread] "
        "register array of packs per thread group, in a grid-stride loop over row groups",
    # batch 13
    "rotary/rope_fanout_forks_workers_head_major_f32_cos_sin_rows_out_of_place_bf16_hogwild.cu":
        "Hogwild!'s rope: each query rotated F times out of place (a fan-out output F times the input, [F, W, Hq, S, "
        "E] from [W, Hq, S, E]) by full-width fp32 cos and sin rows gathered per (view, worker, position), head-major",
    # batch 14
    "softmax/self_attn_softmax_causal_right_padding_len_inplace_block_per_head_loop_rows_fp16_eet.cu":
        "EET's BERT / GPT softmax: one block per (batch, head) looping over its query rows, the mask built on the fly "
        "from a causal limit and an int64 right-padding length per sequence, -1e20 added, a padded row written 0",
    "merge_attn_states/cp_out_correction_per_step_bshd_lse_bhs_int4_inplace_bf16_transformer_engine.cu":
        "Transformer Engine's context-parallel out correction: one step's normalized partial added in place into the "
        "output, weighted by exp(lse_step - lse) against the final lse already merged (no lse written)",
    "rotary/rope_sbhd_uncached_freqs_sincosf_reuse_front_part_partial_warp_by_heads_bf16_aiter.cu":
        "AITER's uncached SBHD rope: every tensor addressed by int32 stride arguments (batch, position, head, dim), "
        "fp32 angles [s, rot / 2], partial rotary with the rest copied, out of place",
    "rotary/rope_2d_image_cached_cos_sin_h_w_tables_grid_hwb_bshd_fp16_aiter.cu":
        "AITER's 2-D image rope: the head's first half rotated by the patch row's cos/sin table [H, d / 2], its second "
        "half by the column's [W, d / 2], the position the block's (row, column)",
    # batch 15
    "rms_norm/rmsnorm_fp16_i4_reorder_outlier_int8_group_smem_tree_scale_index_layout_fp16_atom.cu":
        "Atom's RMSNorm fused with its quantization: the row gathered through a reorder index from shared memory, then "
        "written as int4 groups of 128 and one int8 outlier group with fp16 scales in Atom's own scale layout",
    "gated_act/dequant_silu_and_mul_quant_int32_gemm_out_tmp_buffer_per_token_int8_qserve.cu":
        "QServe's W8A8 activation: int32 GEMM accumulators dequantized by two scales, SiLU-and-mul to an fp32 scratch "
        "re-read to quantize each token to int8 with a per-token scale",
    "group_quant/quant_per_block_int8_fuse_sub_mean_k_nhd_strides_grid_blocks_heads_batch_bf16_sageattention.cu":
        "SageAttention's K quantization: the per-head mean over tokens subtracted, one int8 scale per block of 64 "
        "tokens of a head (a 2-D block over tokens and channels, strides as arguments), not per token group",
    "merge_attn_states/mla_split_kv_reduction_block_per_head_batch_warp0_lse_smem_scales_f32_to_bf16_cutlass.cu":
        "CUTLASS's MLA split-KV reduction: values [b, H, split, 512] but lse [b, split, H] (two N-way layouts at once), "
        "each batch's split count derived from its sequence length through k-tile counts",
    # batch 16
    "softmax/forward_masked_softmax_rows_per_block_kv_shards_4_shared_atomic_max_sum_bool_mask_bf16_tgi.cu":
        "TGI's BLOOM masked softmax: several rows a 1024-thread block, a thread a shard of 4 keys, the rows' max and "
        "sum merged by shared-memory atomics (no reduction the binders read as a row's)",
    "group_quant/per_token_asym_int8_outlier_columns_gather_smem_minmax_tree_idle_blocks_fp16_quik.cu":
        "QUIK's asymmetric per-token int8 over the columns an index list names (scale and zero point side by side), "
        "the outlier columns copied out to an fp16 buffer of their own",
    "merge_attn_states/sdpa_vector_2pass_combine_32_blocks_base2_max_sum_unnormalized_cg_1024_threads_f32_to_bf16_"
    "mlx.cu":
        "MLX's sdpa_vector 2-pass combine: 32 key groups of unnormalized partials with base-2 maxima and sums, "
        "transposed through a shared tile, outputs through int64 strides",
    # batch 17
    "rotary/rotate_sink_tiled_transposed_key_cache_layers_grid_y_exp2f_one_position_inplace_fp16_calm.cu":
        "calm's sink rotation: every layer's key cache in calm's 16-channel tiled, transposed layout, the first "
        "kv_sink positions turned forward by one position (a rotation by a fixed angle step, not to a position)",
    "layer_norm/layer_norm_nc_single_pass_sum_sumsq_ehalf4_float4_gain_threads_template_mean_rstd_out_fp16_"
    "blocksparse.cu":
        "OpenAI blocksparse's LayerNorm NC: its rows read through the library's own 4-wide vector types (ehalf4, "
        "float4) as template arguments, a fused relu flag, mean and rstd outputs",
    "rotary/rotary_pos_emb_thread_per_token_head_major_rotate_half_local_buffers_hfma_inplace_fp16_tinychatengine.cu":
        "TinyChatEngine's rope: one thread a token walking its head through local half buffers, the tables' row "
        "start_idx + token, every product and sum in half (__hfma), q and k head-major in place",
    # batch 18
    "rms_norm/rms_normalize_nested_grid_stride_y_rows_warp_atomic_scale_out_occupancy_launch_f32_dlib.cu":
        "dlib's rms_normalize: a sample's ks * num values one row, its per-channel gamma indexed i / num, the sum of "
        "squares accumulated by warp atomics into the scale output, nested grid-stride loops over samples and columns",
    "merge_attn_states/update_out_and_lse_block_per_row_head_grid_y_f32_out_bshd_transposed_block_lse_bhs_log1p_exp_"
    "inplace_bf16_ringflashattn.cu":
        "ring-flash-attention's update_out_and_lse: a running fp32 output and lse updated in place from one block's "
        "bf16 output and head-major lse (lse + log1p(exp(d))), a two-way merge of which one side is also the result",
    "rotary/rope_rotate_half_full_precision_head_major_q_tail_positions_k_all_grid_t_h_b_out_of_place_bf16_olmo.cu":
        "OLMo's rope: head-major q and k of different lengths, the keys at positions 0 .. Tk - 1 and the queries at "
        "the last Tq of them, angles recomputed per call, out of place",
    "group_quant/groupwise_affine_int4_float_zero_bf16_op_rounding_i32_values_tinygemm_scales_and_zeros_gnk2_warp_per_"
    "group_torchao.cu":
        "torchao's tinygemm int4: asymmetric with a float-domain zero point (min + 8 * scale), every op rounded to "
        "bf16, int32 values and interleaved (scale, zero) pairs in a group-major layout",
    # batch 19
    "merge_attn_states/flash_decoding_combine_glse_fp16_base2_split_inner_layout_grid_heads_batch_128_threads_static_"
    "split8_dim128_tilelang.cu":
        "TileLang's flash-decoding combine: the base-2 lse of each split stored in fp16 (a 16-bit lse input), split "
        "count and head size literals of the generated code",
    "group_quant/sym_quant_int4_row_scales_given_hdiv_half2int_rn_thread_per_packed_byte_2d_blocks_32x16_odd_cols_"
    "fp16_quarot.cu":
        "QuaRot's int4 quantization with the per-row scale given as an input (no amax computed), the division in fp16, "
        "two values a byte",
    "softmax/ctc_compute_probs_column_per_cta_reduce_rows_ctareduce_functors_truncate_flt_min_f32_warpctc.cu":
        "warp-ctc's CTC softmax: probabilities floored at FLT_MIN after the softmax (a truncation the experts lack)",
    "rotary/rot_embed_cat_interleaved_sin_cos_concat_table_prefix_tokens_passthrough_qkv_bnthd_in_bhnd_out_grid_n_b_"
    "bf16_timm.cu":
        "timm's EVA rope: q and k strided views of a fused [B, N, 3, H, D] written to [B, H, N, D], a [N - 1, 2D] sin | "
        "cos table per patch, the class token passed through",
    "softmax/softmax_inplace_grid_stride_rows_cub_block_128_max_sum_in_t_rounded_each_step_fp16_cubert.cu":
        "cuBERT's softmax: every step rounded to half (max, x - max written back, exp, quotient) and the row sums "
        "written to a buffer of their own",
    # batch 20
    "merge_attn_states/flash_decoding_reduce_splits_plus_residual_half_math_thread0_serial_max_sum_smem_weights_"
    "accumulate_into_zeroed_dst_grid_bs_nh_block_d_fp16_million.cu":
        "MILLION's flash-decoding reduce: 16 splits plus a slice of the recent uncompressed tokens (17 states), the "
        "lse in half and every step in half math, the result added into a zero-filled destination",
    "group_quant/quantize_mx_innermost_shared_exp_xor_shuffle_tile32_bit_level_fake_quant_fp8_e4m3_flat_thread_per_"
    "element_f32_microxcaling.cu":
        "microxcaling's MX quantize-dequantize: a shared power-of-two exponent a group of 32 from the largest fp32 "
        "exponent field, each value rounded bit by bit to e4m3 and written back as fp32 (no scale output)",
    "layer_norm/layer_norm_block_per_row_min_hidden_512_two_pass_var_plus_eps_saved_mean_var_half_io_fp16_"
    "hugectr.cu":
        "HugeCTR's LayerNorm: the saved statistics are the mean and the variance plus eps, both rounded to half (not "
        "the rstd the expert writes)",
    # batch 21
    "group_quant/nvfp4_fake_quant_amax_and_convert_block_16x4_cub_block_reduce_two_level_e4m3_scale_global_amax_"
    "bf16_modelopt.cu":
        "ModelOpt's NVFP4 quantize-dequantize: a group of 16's scale from its amax over the tensor's global amax, "
        "rounded to e4m3, each value rounded to e2m1 and written back as bf16 (no scale output)",
    "rotary/rope_apply_3d_fhw_grid_sizes_complex_f64_freqs_split_passthrough_tail_block_per_token_sample_bf16_in_f32_"
    "out_wan.cu":
        "Wan2.1's 3-D rope: (frame, row, column) positions of each sample from its int64 grid sizes, three column "
        "slices of one complex128 table, fp64 math, the tokens past f * h * w copied",
    "rotary/rope_qk_real_per_head_learned_freqs_cos_sin_n_h_half_gptj_bf162_pairs_flat_512_out_of_place_bf16_"
    "mochi.cu":
        "Mochi's rope: cos and sin tables of a row per (token, head) (frequencies learned per head), broadcast over "
        "the batch by a flat pair index modulo the table's pairs",
    # batch 22
    "fused_add_rms_norm/sum_rmsnorm_alpha_scaled_add_pack8_cub_block_reduce_128_threads_recompute_sum_optional_"
    "weight_bias_row_strides_bf16_arctic_inference.cu":
        "ArcticInference's sum + RMSNorm: states + alpha * z (a float scale on the second input) normalized with an "
        "optional weight and bias, the sum recomputed in the store pass and never written",
    "rotary/roformer_sinusoidal_table_sin_even_cos_odd_repeat_elements_qw2_stack_element_per_thread_flat_1024_bshd_"
    "out_of_place_f32_roformer.cu":
        "RoFormer's rope: a sinusoidal table [seq, D] with sin in even and cos in odd columns, each output qw * cos + "
        "qw2 * sin element by element",
    # batch 23
    "merge_attn_states/pa_sdpa_finalization_partitions_256_subgroup16_shuffles_global_memory_version_work_item_per_"
    "head_element_grid_seq_heads_past_lens_short_path_fp16_openvino.cu":
        "OpenVINO's paged-attention finalization: each sequence's partition count from its past length (256 tokens "
        "a partition), sequences of one partition left untouched, the sum divided inside the accumulation",
    "group_quant/quantize_w4a4_act_int4_group64_tvec8_8_lanes_per_group_xor_shuffle_amax_transposed_scales_k64_m_"
    "flat_1024_bf16_nunchaku.cu":
        "Nunchaku's W4A4 activation quantization: symmetric int4 packed two a byte (the even value in the low "
        "nibble), its scales written transposed [K / 64, M]",
    "rotary/rope_nthc_weights_tokens_channels_cos_half_sin_half_vcmul_byte_counts_block_per_batch_head_token_grid_"
    "tokens_heads_batch_out_of_place_f32_xnnpack.cu":
        "XNNPACK's rope_nthc ported from its CPU library: every offset a byte count, the pointers moved through "
        "uintptr_t casts (no index the binders read as an element's)",
    "rotary/rope_complex_mult_freqs_cis_float_pairs_start_pos_symbolic_half2_in_float2_table_half_out_grid_2_32_"
    "seqlen_local_32_generated_e_kernel_fp16_tinygrad.cu":
        "tinygrad's generated rope: the heads and the head size baked into shifted indices, the pairs read through "
        "half2 / float2 pointer casts, the table row start_pos + the grid's z",
    # batch 24
    "softmax/convert_output_multiclass_softmax_class_major_thread_per_data_serial_f64_row_scratch_1024_threads_"
    "lightgbm.cu":
        "LightGBM's multiclass softmax: fp64 (no expert holds doubles), class-major scores copied to a row of a "
        "global scratch buffer and softmaxed there",
    "merge_attn_states/attn_merge_cached_chunk_partials_unnormalized_max_sum_head_major_warp_half2_smem_accum_grid_"
    "heads_seqs_128_threads_fp16_chunk_attn.cu":
        "ChunkAttention's cached-chunk merge: unnormalized partial outputs with a (max, sum) pair each, head-major, "
        "the final division by sum + 1e-6",
    "rotary/qk_rotary_positional_embedding_gptj_pairs_partial_rotary_full_width_sin_cos_per_batch_token_flat_work_"
    "item_per_pair_q_and_k_1024_bf16_itex.cu":
        "Intel Extension for TensorFlow's q / k rope (a SYCL port): inputs and outputs apart with the outputs' "
        "unrotated tails left as they were (inout), sin and cos stored twice per angle",
    # batch 25
    "rotary/apply_rope_rope_n_elem_partial_rotate_half_f32_cache_batched_input_pos_fused_qkv_token_major_in_head_"
    "major_q_k_out_block_per_token_bf16_litgpt.cu":
        "litgpt's rope over a fused qkv row, out of place into HEAD-major q and k ([B, heads, T, hs]: a transposition "
        "the rotary expert does not make), the v heads left out",
    "group_quant/hqq_quantize_4bit_axis0_strided_column_groups_thread_per_group_minmax_inverse_scale_clamp_2e4_pack_"
    "halves_u8_fp16.cu":
        "HQQ's 4-bit quantization: asymmetric (min-max scale and zero point), groups along a strided column, the two "
        "halves of a group packed into one byte's nibbles (no expert packs 4-bit codes)",
    "rotary/apply_rotary_pos_emb_rope_cache_cos_sin_pairs_sq_b_gptj_pairs_rot_dim_half_head_passthrough_strided_"
    "fused_qkv_rows_half_ops_grid_sq_b_fp16_chatglm.cu":
        "ChatGLM's rope: out of place from the q slice of fused qkv rows (a row stride of its own) into contiguous "
        "output rows (the expert's token stride is one for input and output)",
    "layer_norm/layernorm_tk_residual_add_o_resid_out_two_worker_warps_row_per_warp_d_model_1024_template_row_"
    "vectors_in_dynamic_smem_bf16_elementwise_ops_mean_var_rounded_fixed_overlapping_seq_start_bf16_"
    "thunderkittens.cu":
        "ThunderKittens' residual LayerNorm: rows of a template width, a block's rows counted by an argument and its "
        "batch by the grid, every step in bf16 arithmetic (the mean, the variance and the std rounded to bf16)",
    "gated_act/swiglu_flat_half_n_first_half_x1_second_half_x2_modulo_index_std_exp_thread_per_output_256_threads_"
    "extern_c_solve_f32_subygan_algorithms.cu":
        "a LeetGPU SwiGLU whose spec gives the input one element more than its two halves on the odd size set "
        "(N = 2 * halfN + 1): the gated binder takes an input of exactly twice the output",
    # batch 26
    "merge_attn_states/merge_state_numerator_m_l_unnormalized_inplace_warp_per_row_persistent_grid_4096_blocks_256_"
    "threads_isfinite_guards_f32_dllm_parallel.cu":
        "dllm_parallel's merge: two UNNORMALIZED states (numerator, running max, running sum) merged IN PLACE into the "
        "first, weights guarded by isfinite (the expert's unnormalized merges are N-way and out of place)",
    "rms_norm/rmsnorm_decoder_out_copy_to_residual_float4_block_hidden_div4_static_warpsum_64_shfl_xor_block_reduce_"
    "inv_mean_shared_f32_nndeploy.cu":
        "nndeploy's RMSNorm that also copies its input row to a second output (decoder_residual) while summing its "
        "squares: no row expert writes a copy of its input",
    # batch 27
    "merge_attn_states/splitk_combine_decode_base2_lse_split_major_f32_partials_warp_per_q_head_4_floats_per_lane_"
    "chunks_from_kv_lengths_grid_batch_head_tiles_bf16_hpc_ops.cu":
        "Tencent hpc-ops' split-K combine: the chunk count from each batch's kv length through tile rounding and a "
        "minimum split length (template arguments), rows left unwritten where the sequence was not split",
    "group_quant/quantize_kv_int4_per_group_asym_minmax_range_div_15_low_nibble_first_f32_scales_zeros_grid_tokens_"
    "x_groups_256_threads_smem_tree_extern_c_fp16_boostr.cu":
        "boostr's KV int4 quantization: asymmetric (scale (max - min) / 15, zero = min), two codes a byte (no expert "
        "packs 4-bit codes)",
    "merge_attn_states/splitk_phase2_chunk_major_m_s_unnormalized_partials_thread0_serial_max_sum_shared_inv_s_"
    "block_per_q_head_128_threads_device_position_chunks_head_dim_macro_f32_to_bf16_megaqwen.cu":
        "MegaQwen's split-K phase 2: chunk-major unnormalized partials whose live chunk count comes from a position "
        "read on the device",
    # batch 28
    "group_quant/kvcache_qpack_v_tokenwise_i4_asym_minmax_scale_inv_15_over_range_roundf_clamp_4_nibbles_per_uint16_"
    "val0_low_warp_per_128_group_half_params_fp16_bitdecoding.cu":
        "BitDecoding's V-cache packing: asymmetric 4-bit codes, four a uint16 (no expert packs 4-bit codes)",
    "rotary/rotary_embedding_sbhd_q_and_k_tiles_1_seq_16_bh_64_pairs_pid_decomposed_gqa_k_from_bh_full_width_cos_sin_"
    "seq_offset_half_ops_out_of_place_fp16_flashnn.cu":
        "FLASHNN's rope (a Triton port): sequence-first q and k rotated out of place in fp16 arithmetic, tiles of "
        "(batch, head) rows, a sequence offset into full-width cos / sin tables only: no binder reads its tiled index",
    "rotary/apply_rope_token_major_interleaved_pairs_flat_pair_index_per_position_cos_sin_interleaved_table_out_of_"
    "place_global_threads_256_default_stream_f32_mini_llm_cuda.cu":
        "mini-llm-cuda's rope: a token a column of the activations, its position the column index, (cos, sin) pairs "
        "a position: no binder reads a column-per-token layout",
    # batch 29, on first sight
    "group_quant/compress_minmax_uint8_chunks_fused_cub_min_max_header_32_bytes_grid_1_x_chunks_1024_threads_rintf_"
    "upper_lower_bound_fp16_bagua.cu":
        "Bagua's MinMaxUInt8 compression: each chunk's min and max in a 32-byte header inside the byte output, its "
        "codes after it, a chunk stride padded to 32 bytes, bounds from rintf(max * scale): no expert writes a header",
    "rotary/rope_forward_gptj_pairs_rope_cache_cos_sin_interleaved_slice_dim_q_shift_node_slices_float_positions_"
    "block_per_batch_256_threads_out_of_place_f32_distributed_llama.cu":
        "distributed-llama's rope (a Vulkan shader's port): out of place over one node's q or k slice (a flag), a "
        "(cos, sin) pair cache of the slice's width read from a column shift, float positions",
    "rms_norm/layer_norm_fwd_fused_single_pass_is_rmsnorm_block_size_loop_chunks_row_col_strides_mean_rstd_out_eps_"
    "clamp_fp16_kernl.cu":
        "Kernl's RMSNorm (a Triton port, the IS_RMSNORM instantiation of a LayerNorm): row and column strides, an "
        "unused bias pointer, a mean output written 0 and an rstd output: only a LayerNorm binding is offered",
    # batch 30, on first sight
    "group_quant/quantize_and_pack_along_last_dim_kv_asym_minmax_half_scale_mn_half_sub_div_round_half_even_2bit_16_"
    "per_int32_thread_per_group_flat_128_fp16_kivi.cu":
        "KIVI's quantize-and-pack: asymmetric 2-bit codes, sixteen an int32, scale and min in fp16 with every step "
        "rounded to fp16 (no expert packs 2- or 4-bit codes of a min/max quantization)",
    # batch 31, on first sight
    "layer_norm/layer_norm_forward_triton_port_row_per_program_next_pow2_feat_registers_batch_feat_strides_constexpr_"
    "flags_fp16_in_fp32_affine_out_mean_inv_std_4_warps_attorch.cu":
        "attorch's LayerNorm (a Triton port): fp16 input through row and column strides, fp32 weight, bias, output, "
        "mean and inverse std, the flags and the power-of-two width template arguments",
    "rms_norm/rms_norm_fused_norm_kernel_norm_config_occupancy_workgroup_size_vec_switch_rstd_out_bf16_written_then_"
    "reread_bf16_operator_math_bf16_ipex.cu":
        "IPEX's fused RMSNorm: the bf16 rstd written by thread 0 and read back by every thread after a barrier, the "
        "output bf16(bf16(gamma * rstd) * x), the vector width a host switch",
    "rotary/rope_fused_qkv_flat_vec4_pairs_neox_halves_interleaved_freqs_cis_table_value_heads_copied_partial_rotary_"
    "dim_position_ids_out_of_place_block_128_bf16_surogate.cu":
        "surogate's rope: out of place over one fused qkv buffer (the value heads copied), NeoX halves turned by a "
        "table of interleaved (cos, sin) pairs, position ids, partial rotary, four pairs a thread",
    # batch 32, on first sight
    "rotary/rotary_emb_inplace_one_chunk_of_fused_qkv_b_s_3_h_d_strides_grid_batch_heads_block_rotary_half_by_32_"
    "positions_strided_over_y_neox_halves_f32_cos_sin_pos_by_half_extern_c_fp16_openfish.cu":
        "openfish's rotary_emb: in place on one chunk (q or k) of a fused qkv [B, S, 3, H, D] through stride arguments, "
        "a block (rotary_half, 32) per (batch, head) walking the positions over y, fp32 cos and sin tables",
    "rms_norm/partial_rms_norm_p_fraction_of_row_eps_added_to_rms_rms_output_bias_triton_port_row_per_program_next_"
    "pow2_registers_runs_of_4_y_x_strides_4_warps_f32_trident.cu":
        "Trident's partial RMSNorm: the RMS over the first int(x_size * p) columns only, x / (rms + eps), the rms "
        "written out, an optional bias, row strides",
    "rotary/apply_rope_2x2_rotation_matrix_pe_b_l_pairs_2_2_f32_from_embednd_3_axis_ids_bhld_q_and_k_gptj_pairs_"
    "products_rounded_then_summed_grid_pairs_bh_out_of_place_bf16_flux.cu":
        "Flux's apply_rope: each pair turned by a 2 x 2 rotation matrix of a tensor pe [B, L, D / 2, 2, 2] (no cos / "
        "sin cache, no positions), the products rounded then summed, out of place",
    "merge_attn_states/flash_fwd_splitkv_combine_triton_port_split_major_f32_normalized_partials_natural_lse_rows_b_"
    "h_q_flattened_block_m_4_x_max_splits_8_x_block_k_tile_out_bshd_strides_fixed_bf16_flaggems.cu":
        "FlagGems' split-KV combine: split-major fp32 partials over rows of (batch, head, query) flattened, a block of "
        "4 rows x 8 splits x a head-dim tile, the output [b, s, h, d] through its strides",
    # batch 33 (2026-11-30), on first sight
    "merge_attn_states/ring_attention_update_sbh_attn_out_softmax_max_sum_b_n_s_8_replicated_tail_max_sum_outputs_block_per_bn_x_32_seq_rows_scales_smem_mul_then_add_rint_out_of_place_bf16_mindspeed.cu":
        "MindSpeed's ring attention update (an AscendC op): states [S, B, H] with a (max, sum) pair per row replicated 8 "
        "times ([B, N, S, 8]), a two-way merge that also writes the merged max and sum: no binder reads replicated "
        "8-lane statistics",
    "group_quant/bfp16_block_floating_point_fake_quant_shared_max_biased_exponent_8_value_blocks_thread_per_block_double_pow2_scale_round_clamp_inf_nan_passthrough_onnx_pad_fused_flat_256_f32_quark.cu":
        "AMD Quark's BFP16: a shared exponent a block of 8 values (the largest exponent field), each value rounded to it "
        "and written back as fp32 (no scale output), the scale computed in double",
    "rotary/rotaryembed_vulkan_pack4_four_heads_per_f16vec4_head_major_cstep_cos_sin_cache_seq_by_half_dim_neox_halves_specialization_interleaved_local_64_4_4_fp16_arithmetic_out_of_place_fp16_ncnn.cu":
        "ncnn's Vulkan rope (pack4): four heads interleaved in each 4-wide fp16 vector of a padded head-major layout: no "
        "binder reads heads interleaved element by element",
    "fused_add_rms_norm/rms_norm_fuse_pre_add_tilized_32x32_tiles_16x16_faces_tile_rows_split_over_8x8_core_grid_two_groups_bf16_packed_intermediates_reduce_scaler_winv_sqrt_recip_gamma_row_bcast_normed_only_bf16_tt_metal.cu":
        "tt-metal's RMSNorm over tilized data: 32 x 32 tiles of 16 x 16 faces (a row's elements scattered over tiles and "
        "faces), the sum normalized but never written, every intermediate in bf16",
    "rms_norm/rmsnorm_kernel_class_params_unpacked_from_grid_constant_row_in_registers_max_hidden_8192_256_threads_32_contiguous_per_thread_int4_int2_scalar_by_n_alignment_shfl_down_atomicadd_smem_sum_w_times_x_div_rms_bf16_fastvideo.cu":
        "FastVideo's RMSNorm as a CUTLASS-style kernel class (operator() over a Params struct, Loader and Saver classes "
        "whose methods do the reads and writes): no binder reads through a class's member functions",
    "layer_norm/group_norm_over_heads_layer_norm_fwd_triton_port_64_rows_of_head_dim_per_program_weight_bias_by_row_mod_groups_8_lane_row_groups_mean_rstd_out_rwkv7_ln_x_bf16_fla.cu":
        "flash-linear-attention's GroupNorm over heads (RWKV-7's ln_x): 64-wide rows whose weight and bias rows are "
        "chosen by the row index modulo the group count, mean and rstd outputs",
    # batch 34 (2026-11-30b), on first sight
    "group_quant/compress_group_wise_asym_4bit_min_max_inverse_scale_reciprocal_times_15_fp16_tensor_ops_round_half_even_zero_padded_tail_group_pairs_high_nibble_first_scale_mn_planes_any_group_dim_thread_per_group_flat_256_fp16_flexgen.cu":
        "FlexGen's group-wise compress: asymmetric 4-bit codes, two a byte with the even element in the high nibble, (scale, min) as two planes, every op rounded to fp16 (no expert packs 4-bit codes of a min/max quantization)",
    "rotary/triton_rotary_inplace_keys_of_fused_key_value_b_s_2hkv_d_strides_positions_pid_mod_seq_len_f32_freq_table_cos_block_then_sin_block_neox_halves_tile_8_heads_x_64_pairs_4_warps_bf16_fast_llm.cu":
        "Fast-LLM's Triton rotary: the keys rotated in place inside a fused key/value tensor [b, s, 2 * hkv, d] through stride arguments, one f32 table of cos rows then sin rows, positions the program id modulo the sequence length: no binder reads its tiled index",
    "merge_attn_states/sp_flash_decode_global_reduce_rank_major_fp16_partials_lse_appended_as_element_dv_online_max_sum_skip_ranks_with_empty_kv_grid_batch_heads_4_warps_fast_expf_fp16_iris.cu":
        "Iris' flash-decode global reduce: one partial state per GPU rank, rank-major fp16 rows with the lse appended as their last element, ranks with no keys skipped: no binder reads an lse stored inside the value rows",
}


def variants() -> list[dict]:
    if not MANIFEST.is_file():
        return []
    return tomllib.loads(MANIFEST.read_text())["variant"]


@pytest.mark.skipif(not MANIFEST.is_file(), reason="bench/corpus/corpus.toml is not in this checkout yet")
@pytest.mark.parametrize("v", [pytest.param(v, marks=pytest.mark.xfail(reason=KNOWN_GAPS[v["file"]], strict=True))
                               if v["file"] in KNOWN_GAPS else v
                               for v in variants() if not v["family"].startswith("other:")], ids=lambda v: v["file"])
def test_corpus_variant_gets_a_candidate_of_its_family(v):
    from agent_core.source import spec as spec_mod
    from agent_core.source.cuda_parse import parse_cuda
    from agent_core.templating import experts
    assert v["family"] in EXPERT_FAMILIES, f"unknown corpus family {v['family']}"
    path = MANIFEST.parent / v["file"]
    cf = parse_cuda(path.read_text(encoding="utf-8"), str(path))
    spec = spec_mod.find_spec(cf, v["kernel"])  # what `kerntune show` reads: no structural template needed
    assert spec is not None, f"{v['file']}: no spec above {v['kernel']}"
    got = {b.expert.family for b in experts.candidates(cf, v["kernel"], spec)}
    assert got & EXPERT_FAMILIES[v["family"]], (v["file"], v["style"], sorted(got))
