// Attention probabilities with per-head attention sinks, as gpt-oss's eager attention computes them: every score row
// gets one extra logit, the head's learned sink, which joins the max and the normalizing sum but has no column in
// the output,
//   m = max(max_k x_k, sink_h),  p_k = exp(x_k - m) / (sum_k exp(x_k - m) + exp(sink_h - m))
// (torch: softmax(cat([scores, sinks], -1))[..., :-1]). Scores and probabilities are bf16
// [batch, num_heads, q_len, k_len] (out of place, the scaling and any mask already applied), sinks bf16
// [num_heads]. The port keeps the logits in fp32 from the load on (the eager module's subtraction of the max in
// bf16 is not reproduced) and rounds once at the store. One block per score row (a flat 1-D grid over
// batch * num_heads * q_len, the head recovered as (row / q_len) % num_heads), the block size a template parameter
// (256); the row max and the sum of exponentials are two cub::BlockReduce reductions (a max functor, then Sum)
// published by thread 0 through shared memory; three reads of the row.
// Inputs: scores uniform(-4, 4) and sinks uniform(6, 10), so that the sink carries a sizable share of every row's
// mass (about 1.4% to 44% of it at k_len = 4096, 7% to 81% at k_len = 777) and a kernel that drops it fails the
// comparison. Tolerance: probabilities are ~1e-2 and below, far under the default bf16 atol of 1e-2, so atol is
// 1e-6 (rtol stays at the bf16 default, one rounding being 4e-3 relative).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cub/block/block_reduce.cuh>
#include <cstdint>
#include <cmath>

struct MaxOp {
  __device__ __forceinline__ float operator()(const float a, const float b) const { return fmaxf(a, b); }
};

/* kerntune:
args  = ["scores: in bf16[batch * num_heads * q_len * k_len] ~ uniform(-4, 4)",
         "sinks: in bf16[num_heads] ~ uniform(6, 10)",
         "probs: out bf16[batch * num_heads * q_len * k_len]",
         "num_heads: i32 = num_heads", "q_len: i32 = q_len", "k_len: i32 = k_len"]
sizes = [{ batch = 1, num_heads = 64, q_len = 512, k_len = 1024 },
         { batch = 16, num_heads = 64, q_len = 1, k_len = 4096 },
         { batch = 3, num_heads = 8, q_len = 37, k_len = 777 }]
grid  = "batch * num_heads * q_len"
block = 256
atol  = 1e-6
template_args = ["256"]
*/
template <int kThreads>
__global__ void attn_softmax_with_sinks_kernel(const __nv_bfloat16* __restrict__ scores,
                                               const __nv_bfloat16* __restrict__ sinks,
                                               __nv_bfloat16* __restrict__ probs, const int num_heads,
                                               const int q_len, const int k_len) {
  using BlockReduce = cub::BlockReduce<float, kThreads>;
  __shared__ typename BlockReduce::TempStorage temp_storage;
  __shared__ float s_max;
  __shared__ float s_inv_sum;

  const int64_t row = blockIdx.x;
  const int head = static_cast<int>((row / q_len) % num_heads);
  const float sink = __bfloat162float(sinks[head]);
  const __nv_bfloat16* x = scores + row * k_len;
  __nv_bfloat16* p = probs + row * k_len;

  float thread_max = -INFINITY;
  for (int k = threadIdx.x; k < k_len; k += kThreads) thread_max = fmaxf(thread_max, __bfloat162float(x[k]));
  const float block_max = BlockReduce(temp_storage).Reduce(thread_max, MaxOp());
  if (threadIdx.x == 0) s_max = fmaxf(block_max, sink);
  __syncthreads();  // also frees temp_storage for the second reduction
  const float row_max = s_max;

  float thread_sum = 0.0f;
  for (int k = threadIdx.x; k < k_len; k += kThreads) thread_sum += expf(__bfloat162float(x[k]) - row_max);
  const float block_sum = BlockReduce(temp_storage).Sum(thread_sum);
  if (threadIdx.x == 0) s_inv_sum = 1.0f / (block_sum + expf(sink - row_max));
  __syncthreads();
  const float inv_sum = s_inv_sum;

  for (int k = threadIdx.x; k < k_len; k += kThreads) {
    p[k] = __float2bfloat16(expf(__bfloat162float(x[k]) - row_max) * inv_sum);
  }
}

constexpr int kSinkSoftmaxThreads = 256;

// scores, probs: [batch, num_heads, q_len, k_len] bf16; sinks: [num_heads] bf16. Device pointers.
void attn_softmax_with_sinks(const __nv_bfloat16* scores, const __nv_bfloat16* sinks, __nv_bfloat16* probs,
                             int batch, int num_heads, int q_len, int k_len, cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(batch) * num_heads * q_len;
  if (rows == 0 || k_len == 0) return;
  attn_softmax_with_sinks_kernel<kSinkSoftmaxThreads><<<static_cast<unsigned>(rows), kSinkSoftmaxThreads, 0, stream>>>(
      scores, sinks, probs, num_heads, q_len, k_len);
}
