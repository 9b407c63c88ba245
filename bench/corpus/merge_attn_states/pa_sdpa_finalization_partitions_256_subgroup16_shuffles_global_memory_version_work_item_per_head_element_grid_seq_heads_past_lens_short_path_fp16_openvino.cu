// The finalization stage of OpenVINO's GPU PagedAttention (openvinotoolkit/openvino, the intel_gpu plugin's
// pa_sdpa_opt.cl, KERNEL(pa_sdpa_finalization_stage) compiled with SDPA_STAGE_1, run after stage 0 has split each
// sequence's context into partitions of SEQ_LEN_PARTITION_SIZE = 256 tokens), ported from OpenCL to CUDA, fp16:
//   past_lens [sequences] i32 (context length of each sequence = past_lens + 1, so the partition count varies per
//   sequence: num_of_partitions = CEIL_DIV(seq_len, 256) <= total_partitions_num)
//   exp_sums, max_logits [sequences, HEADS_NUM, total_partitions_num] f32 (SOFTMAX_ACCUMULATOR_TYPE), natural-base:
//   each partition's row max and its sum of exp(s - max)
//   tmp_out [sequences, HEADS_NUM, total_partitions_num, HEAD_SIZE] f16 (OUTPUT_TYPE), each partition's normalized
//   partial output; output [sequences, HEADS_NUM * HEAD_SIZE] f16
//   global_max = subgroup max over partitions, global_sum = sum exp_sums[p] * exp(max_logits[p] - global_max),
//   out = sum_p tmp_out[p] * (exp_sums[p] * exp(max_logits[p] - global_max)) / global_sum, accumulated in float with
//   the division inside the loop, one rounding at the store; native_exp -> __expf
//   SHORT PATH: a sequence of <= 256 tokens was written to output directly by stage 0 and is skipped here (output
//   is therefore inout: those rows keep what is in the buffer)
// Launch as OpenVINO's dispatch data: global (sequences, HEADS_NUM, HEAD_SIZE), local (1, 1, HEAD_SIZE) -> one block
// of HEAD_SIZE threads per (sequence, head), grid (sequences, heads); every work-item owns one head element and its
// sub-group of SUBGROUP_SIZE = 16 lanes redundantly reduces max and sum over the partitions (lane-strided loads,
// sub_group_reduce_max / _add written as width-16 xor shuffles). HEADS_NUM, a JIT constant in OpenVINO, is the
// grid's y extent here; HEAD_SIZE stays a compile-time constant (template), unsigned 32-bit offsets as in the .cl.
// Kept: only the "global memory" variant (the .cl also has a register variant for <= 384 partitions that caches
// exp_sums in private arrays); no bug found. The kernel_selector / clKernelData plumbing is replaced by a launcher.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>

#define SUBGROUP_SIZE 16
#define SEQ_LEN_PARTITION_SIZE 256
#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

typedef unsigned int uint;
#define SOFTMAX_ACCUMULATOR_TYPE float
#define SOFTMAX_ACCUMULATOR_VAL_ZERO 0.0f
#define SOFTMAX_ACCUMULATOR_VAL_MIN (-FLT_MAX)
#define TO_SOFTMAX_ACCUMULATOR_TYPE(x) __half2float(x)
#define TO_OUTPUT_TYPE(x) __float2half(x)

__device__ __forceinline__ float sub_group_reduce_max(float v) {
#pragma unroll
    for (int offset = SUBGROUP_SIZE / 2; offset > 0; offset >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, offset, SUBGROUP_SIZE));
    return v;
}

__device__ __forceinline__ float sub_group_reduce_add(float v) {
#pragma unroll
    for (int offset = SUBGROUP_SIZE / 2; offset > 0; offset >>= 1)
        v += __shfl_xor_sync(0xffffffff, v, offset, SUBGROUP_SIZE);
    return v;
}

// Launched by pa_sdpa_finalization below: grid (sequences, heads), block HEAD_SIZE. past_lens ~ randint keeps every
// sequence within total_partitions_num partitions; exp_sums are sums of exponentials (>= 1).
/* kerntune:
args  = ["past_lens: in i32[seqs] ~ randint(0, P * 256 - 1)", "output: inout f16[seqs * heads * 128]",
         "exp_sums: in f32[seqs * heads * P] ~ uniform(1, 64)", "max_logits: in f32[seqs * heads * P] ~ uniform(-4, 12)",
         "tmp_out: in f16[seqs * heads * P * 128]", "total_partitions_num: u32 = P"]
sizes = [{ seqs = 256, heads = 32, P = 32 }, { seqs = 8, heads = 32, P = 16 }, { seqs = 5, heads = 7, P = 3 }]
grid  = ["seqs", "heads"]
block = 128
template_args = ["128"]
*/
template <int HEAD_SIZE>
__global__ void pa_sdpa_finalization_stage(const int* past_lens, half* output, const SOFTMAX_ACCUMULATOR_TYPE* exp_sums,
                                           const SOFTMAX_ACCUMULATOR_TYPE* max_logits, const half* tmp_out,
                                           const uint total_partitions_num) {
    const uint HEADS_NUM = gridDim.y;
    const uint seq_idx = blockIdx.x;
    const uint head_num_idx = blockIdx.y;
    const uint head_size_idx = threadIdx.x;
    const uint sglid = threadIdx.x % SUBGROUP_SIZE;

    const uint seq_len = past_lens[seq_idx] + 1;

    const uint num_of_partitions = CEIL_DIV(seq_len, SEQ_LEN_PARTITION_SIZE);

    if (seq_len <= SEQ_LEN_PARTITION_SIZE) {
        /* Short path, the sequence's output was written by stage 0 */
        return;
    }

    SOFTMAX_ACCUMULATOR_TYPE local_exp_sum = SOFTMAX_ACCUMULATOR_VAL_ZERO;
    SOFTMAX_ACCUMULATOR_TYPE local_max_logit = SOFTMAX_ACCUMULATOR_VAL_MIN;

    const uint iters_num = CEIL_DIV(num_of_partitions, SUBGROUP_SIZE);
    for (uint i = 0; i < iters_num; i++) {
        const uint partition_idx = i * SUBGROUP_SIZE + sglid;
        const uint max_logit_offset = seq_idx * HEADS_NUM * total_partitions_num +
                                      head_num_idx * total_partitions_num + partition_idx;

        if (partition_idx < num_of_partitions) {
            local_max_logit = fmaxf(local_max_logit, max_logits[max_logit_offset]);
        }
    }

    SOFTMAX_ACCUMULATOR_TYPE global_max = sub_group_reduce_max(local_max_logit);

    // Calculate global sum
    for (uint i = 0; i < iters_num; i++) {
        const uint partition_idx = i * SUBGROUP_SIZE + sglid;
        const uint exp_sums_offset = seq_idx * HEADS_NUM * total_partitions_num +
                                     head_num_idx * total_partitions_num + partition_idx;
        const uint max_logit_offset = exp_sums_offset;

        if (partition_idx < num_of_partitions) {
            local_exp_sum += exp_sums[exp_sums_offset] * __expf(max_logits[max_logit_offset] - global_max);
        }
    }

    SOFTMAX_ACCUMULATOR_TYPE global_sum = sub_group_reduce_add(local_exp_sum);

    SOFTMAX_ACCUMULATOR_TYPE acc = 0.0f;
    for (uint partition_num = 0; partition_num < num_of_partitions; partition_num++) {
        const uint tmp_out_offset = seq_idx * (HEADS_NUM * total_partitions_num * HEAD_SIZE) +
                                    head_num_idx * (total_partitions_num * HEAD_SIZE) +
                                    partition_num * HEAD_SIZE +
                                    head_size_idx;

        const uint exp_sums_offset = seq_idx * HEADS_NUM * total_partitions_num +
                                     head_num_idx * total_partitions_num + partition_num;
        const uint max_logit_offset = exp_sums_offset;

        SOFTMAX_ACCUMULATOR_TYPE new_exp_sum = exp_sums[exp_sums_offset] * __expf(max_logits[max_logit_offset] - global_max);

        half out_val = tmp_out[tmp_out_offset];
        acc += TO_SOFTMAX_ACCUMULATOR_TYPE(out_val) * new_exp_sum / global_sum;
    }
    const uint out_offset = seq_idx * (HEADS_NUM * HEAD_SIZE) +
                            head_num_idx * HEAD_SIZE +
                            head_size_idx;

    output[out_offset] = TO_OUTPUT_TYPE(acc);
}

namespace ov {
namespace intel_gpu {

// Device pointers. exp_sums / max_logits: [sequences, heads, total_partitions_num] f32; tmp_out: [sequences, heads,
// total_partitions_num, head_size] f16; output: [sequences, heads * head_size] f16. total_partitions_num =
// CEIL_DIV(max context length, 256). Returns false for a head size without an instantiation.
bool pa_sdpa_finalization(const int* past_lens, half* output, const float* exp_sums, const float* max_logits,
                          const half* tmp_out, int64_t sequences, int64_t heads, int64_t head_size,
                          int64_t total_partitions_num, cudaStream_t stream) {
    const dim3 gws_blocks(static_cast<uint>(sequences), static_cast<uint>(heads), 1);
    const dim3 lws(static_cast<uint>(head_size), 1, 1);
    const uint partitions = static_cast<uint>(total_partitions_num);
    switch (head_size) {
        case 64:
            pa_sdpa_finalization_stage<64><<<gws_blocks, lws, 0, stream>>>(past_lens, output, exp_sums, max_logits,
                                                                          tmp_out, partitions);
            return true;
        case 128:
            pa_sdpa_finalization_stage<128><<<gws_blocks, lws, 0, stream>>>(past_lens, output, exp_sums, max_logits,
                                                                           tmp_out, partitions);
            return true;
        case 256:
            pa_sdpa_finalization_stage<256><<<gws_blocks, lws, 0, stream>>>(past_lens, output, exp_sums, max_logits,
                                                                           tmp_out, partitions);
            return true;
        default:
            return false;
    }
}

}  // namespace intel_gpu
}  // namespace ov
