// Attention probabilities of a Hugging Face eager attention module written as one CUDA kernel, for a bf16 model
// that keeps its 4-D "extended" attention mask in fp32:
//   attn_weights = (query @ key^T) * scaling                 # bf16 scores, rounded to bf16 after the scaling
//   attn_weights = attn_weights + attention_mask             # mask [batch, 1, q_len, k_len], fp32 (promotes)
//   attn_weights = softmax(attn_weights, dim=-1, dtype=fp32).to(bf16)
// Scores and probabilities are [batch, num_heads, q_len, k_len] (out of place); the mask row of (b, q) is shared by
// every head (the size-1 head dimension broadcasts). A 3-D grid (q_len, num_heads, batch) with one block of 256
// threads per score row; each thread keeps an online (max, sum of exponentials) pair over its strided keys, the
// 256 pairs are merged by a shared-memory halving tree, and a second pass re-reads scores and mask to write
// exp(x - max) / sum. The scaled score is rounded to bf16 before the mask is added, where the eager module's
// `attn_weights * scaling` leaves it.
// Masks: the padding / causal masks that the model builds hold 0 and torch.finfo(fp32).min (finite, so a fully
// masked query row gives a uniform row as in PyTorch, not NaN; an all -inf row gives NaN, as torch.softmax does).
// The spec's init cannot draw that two-valued mix, and uniform(-10000, 0) would make every row nearly one-hot
// (bf16 rounding would hide a missing normalization), so the mask is drawn uniform(-8, 0): the range of a soft
// additive bias (ALiBi-style or a user's 4-D float mask) that keeps every probability in the comparison.
// Tolerance: probabilities are ~1/k_len and below, so the default bf16 atol of 1e-2 would accept any output; atol is
// 1e-6, rtol stays at the bf16 default (one bf16 rounding is 4e-3 relative).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdint>
#include <cmath>

constexpr int kSoftmaxThreads = 256;  // one block per row; the halving tree needs a power of two

// Fold one (max, sum) pair into another: sum of exp(x - max) over both sets, with the larger max.
__device__ __forceinline__ void merge_max_sum(float& m, float& s, const float m_other, const float s_other) {
  const float m_new = fmaxf(m, m_other);
  if (m_new == -INFINITY) return;  // both sets empty (or all -inf): nothing to add
  s = s * expf(m - m_new) + s_other * expf(m_other - m_new);
  m = m_new;
}

/* kerntune:
args  = ["attn_scores: in bf16[batch * num_heads * q_len * k_len]",
         "attention_mask: in f32[batch * q_len * k_len] ~ uniform(-8, 0)",
         "attn_probs: out bf16[batch * num_heads * q_len * k_len]", "scaling: f32 = 0.08838834764831845",
         "batch: i32 = batch", "num_heads: i32 = num_heads", "q_len: i32 = q_len", "k_len: i32 = k_len"]
sizes = [{ batch = 2, num_heads = 32, q_len = 512, k_len = 1024 },
         { batch = 8, num_heads = 32, q_len = 1, k_len = 4096 },
         { batch = 3, num_heads = 9, q_len = 61, k_len = 397 }]
grid  = ["q_len", "num_heads", "batch"]
block = 256
atol  = 1e-6
*/
__global__ void eager_softmax_extended_mask_kernel(const __nv_bfloat16* __restrict__ attn_scores,
                                                   const float* __restrict__ attention_mask,
                                                   __nv_bfloat16* __restrict__ attn_probs, const float scaling,
                                                   const int batch, const int num_heads, const int q_len,
                                                   const int k_len) {
  const int q = blockIdx.x;
  const int h = blockIdx.y;
  const int b = blockIdx.z;
  if (b >= batch || h >= num_heads || q >= q_len) return;  // the whole block leaves, before any barrier
  const int tid = threadIdx.x;

  // attn_weights[b, h, q, :] and attention_mask[b, 0, q, :]
  const int64_t row = ((int64_t)b * num_heads + h) * q_len + q;
  const __nv_bfloat16* scores = attn_scores + row * k_len;
  const float* mask = attention_mask + ((int64_t)b * q_len + q) * k_len;
  __nv_bfloat16* probs = attn_probs + row * k_len;

  __shared__ float s_max[kSoftmaxThreads];
  __shared__ float s_sum[kSoftmaxThreads];

  // pass 1: online max and sum of exponentials over this thread's keys
  float thread_max = -INFINITY;
  float thread_sum = 0.f;
  for (int k = tid; k < k_len; k += kSoftmaxThreads) {
    const float scaled = __bfloat162float(__float2bfloat16(__bfloat162float(scores[k]) * scaling));
    const float x = scaled + mask[k];
    merge_max_sum(thread_max, thread_sum, x, 1.f);
  }
  s_max[tid] = thread_max;
  s_sum[tid] = thread_sum;
  __syncthreads();

  // the 256 pairs merged by a halving tree
  for (int stride = kSoftmaxThreads / 2; stride > 0; stride >>= 1) {
    if (tid < stride) {
      float m = s_max[tid];
      float s = s_sum[tid];
      merge_max_sum(m, s, s_max[tid + stride], s_sum[tid + stride]);
      s_max[tid] = m;
      s_sum[tid] = s;
    }
    __syncthreads();
  }
  const float row_max = s_max[0];
  const float inv_sum = 1.f / s_sum[0];

  // pass 2: re-read the row and write the probabilities
  for (int k = tid; k < k_len; k += kSoftmaxThreads) {
    const float scaled = __bfloat162float(__float2bfloat16(__bfloat162float(scores[k]) * scaling));
    const float x = scaled + mask[k];
    probs[k] = __float2bfloat16(expf(x - row_max) * inv_sum);
  }
}

// attn_scores, attn_probs: [batch, num_heads, q_len, k_len] bf16; attention_mask: [batch, 1, q_len, k_len] fp32
// (additive: 0 to attend, a large negative value to mask). All pointers on the device.
void eager_softmax_extended_mask(const __nv_bfloat16* attn_scores, const float* attention_mask,
                                 __nv_bfloat16* attn_probs, float scaling, int batch, int num_heads, int q_len,
                                 int k_len, cudaStream_t stream) {
  if (batch == 0 || num_heads == 0 || q_len == 0 || k_len == 0) return;
  const dim3 grid(q_len, num_heads, batch);
  const dim3 block(kSoftmaxThreads);
  eager_softmax_extended_mask_kernel<<<grid, block, 0, stream>>>(attn_scores, attention_mask, attn_probs, scaling,
                                                                 batch, num_heads, q_len, k_len);
}
