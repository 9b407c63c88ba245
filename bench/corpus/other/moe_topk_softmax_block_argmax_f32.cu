// MoE router: softmax over the experts followed by top-k selection, the operation vLLM's topk_softmax and
// TensorRT-LLM's MoE routing perform before the grouped expert GEMMs (Mixtral, Qwen2/3-MoE, Qwen3-Next), written
// after their general fallback path (the one taken for expert counts the warp-specialized kernel does not cover,
// e.g. 60): a block of TPB = 256 threads per token, cub::BlockReduce for the row max and the sum of exponentials,
// then k rounds of a block-wide arg-max over cub::KeyValuePair<int, float> (cub::ArgMax keeps the lower expert on
// ties), each round excluding the experts already chosen by reading back the indices written by earlier rounds;
// the two fallback kernels of that path are fused here into one, the probabilities recomputed from the logits in
// every round instead of being kept in a workspace.
//   p_e = exp(x_e - max) / sum      (fp32 router logits [num_tokens, num_experts], expf)
//   topk_weights [num_tokens, k] fp32 and topk_ids [num_tokens, k] int32, in decreasing order of p;
//   with renormalize (Mixtral, Qwen3 norm_topk_prob) the k weights are divided by their sum.
// Launch: grid num_tokens, block TPB (template parameter, 256; __launch_bounds__(TPB)).
#include <cuda_runtime.h>
#include <cub/block/block_reduce.cuh>
#include <cfloat>
#include <cstdint>

namespace moe {

struct MaxOp {
  __device__ __forceinline__ float operator()(const float a, const float b) const { return fmaxf(a, b); }
};
struct SumOp {
  __device__ __forceinline__ float operator()(const float a, const float b) const { return a + b; }
};

/* kerntune:
args  = ["gating_output: in f32[num_tokens * num_experts]", "topk_weights: out f32[num_tokens * topk]",
         "topk_ids: out i32[num_tokens * topk]", "num_experts: i32 = num_experts", "k: i32 = topk",
         "renormalize: u8 = 1"]
sizes = [{ num_tokens = 32768, num_experts = 512, topk = 10 }, { num_tokens = 8, num_experts = 128, topk = 8 },
         { num_tokens = 1001, num_experts = 60, topk = 4 }]
grid  = "num_tokens"
block = 256
template_args = ["256"]
*/
template <int TPB>
__launch_bounds__(TPB) __global__ void topk_softmax_kernel(const float* __restrict__ gating_output,
                                                           float* __restrict__ topk_weights,
                                                           int* __restrict__ topk_ids, const int num_experts,
                                                           const int k, const bool renormalize) {
  using BlockReduce = cub::BlockReduce<float, TPB>;
  using cub_kvp = cub::KeyValuePair<int, float>;
  using BlockReduceKvp = cub::BlockReduce<cub_kvp, TPB>;
  __shared__ typename BlockReduce::TempStorage tmp_storage;
  __shared__ typename BlockReduceKvp::TempStorage kvp_storage;
  __shared__ float float_max;
  __shared__ float normalizing_factor;

  const int64_t row_offset = static_cast<int64_t>(blockIdx.x) * num_experts;
  const int64_t out_offset = static_cast<int64_t>(blockIdx.x) * k;

  // softmax statistics
  float thread_data = -FLT_MAX;
  for (int e = threadIdx.x; e < num_experts; e += TPB) {
    thread_data = fmaxf(thread_data, gating_output[row_offset + e]);
  }
  const float max_elem = BlockReduce(tmp_storage).Reduce(thread_data, MaxOp());
  if (threadIdx.x == 0) float_max = max_elem;
  __syncthreads();

  thread_data = 0.0f;
  for (int e = threadIdx.x; e < num_experts; e += TPB) {
    thread_data += expf(gating_output[row_offset + e] - float_max);
  }
  const float z = BlockReduce(tmp_storage).Reduce(thread_data, SumOp());
  if (threadIdx.x == 0) normalizing_factor = 1.0f / z;
  __syncthreads();

  // top-k by repeated arg-max
  cub::ArgMax arg_max;
  float selected_sum = 0.0f;
  for (int k_idx = 0; k_idx < k; ++k_idx) {
    cub_kvp thread_kvp;
    thread_kvp.key = 0;
    thread_kvp.value = -1.0f;  // below every probability
    for (int e = threadIdx.x; e < num_experts; e += TPB) {
      cub_kvp inp_kvp;
      inp_kvp.key = e;
      inp_kvp.value = expf(gating_output[row_offset + e] - float_max) * normalizing_factor;
      for (int prior_k = 0; prior_k < k_idx; ++prior_k) {
        if (topk_ids[out_offset + prior_k] == e) {
          inp_kvp.value = -1.0f;  // already chosen
          break;
        }
      }
      thread_kvp = arg_max(inp_kvp, thread_kvp);
    }
    const cub_kvp result_kvp = BlockReduceKvp(kvp_storage).Reduce(thread_kvp, arg_max);
    if (threadIdx.x == 0) {
      topk_weights[out_offset + k_idx] = result_kvp.value;
      topk_ids[out_offset + k_idx] = result_kvp.key;
      selected_sum += result_kvp.value;
    }
    __syncthreads();  // the chosen id is visible to the next round, kvp_storage reusable
  }

  if (renormalize && threadIdx.x == 0) {
    const float inv = 1.0f / selected_sum;
    for (int k_idx = 0; k_idx < k; ++k_idx) {
      topk_weights[out_offset + k_idx] *= inv;
    }
  }
}

}  // namespace moe

// gating_output: [num_tokens, num_experts] fp32 router logits; topk_weights: [num_tokens, k] fp32; topk_ids:
// [num_tokens, k] int32. Device pointers; k <= num_experts.
void topk_softmax(const float* gating_output, float* topk_weights, int* topk_ids, int num_tokens, int num_experts,
                  int k, bool renormalize, cudaStream_t stream) {
  if (num_tokens == 0) return;
  static constexpr int TPB = 256;
  moe::topk_softmax_kernel<TPB><<<num_tokens, TPB, 0, stream>>>(gating_output, topk_weights, topk_ids, num_experts,
                                                                k, renormalize);
}
