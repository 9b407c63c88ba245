// Unfused attention probabilities with ALiBi, in the style of FasterTransformer's masked softmax for BLOOM: the QK^T
// GEMM's fp32 output qk [batch, heads, q_len, k_len] to fp16 probabilities attn_score (same shape), with
//   x = qk_scale * qk + slope[h] * (k - q) + (1 - mask[b, q, k]) * -10000
// where attn_mask is fp16 [batch, q_len, k_len] holding 1 (keep) or 0 (masked: -10000 added, not -inf) and
// linear_bias_slopes fp16 [heads] the per-head ALiBi slopes (nullable; the bias is not zeroed above the diagonal,
// the mask takes care of it); p = exp(x - max) / (sum + 1e-6) with __expf and __fdividef, one rounding to fp16.
// The row is held in registers: template <T, T_IN, ITEMS_PER_THREAD>, each thread keeping ITEMS_PER_THREAD scores
// of the row; the max and the sum by blockReduceMax / blockReduceSum (xor shuffles, 32 warp partials in shared
// memory), published by thread 0 through __shared__ s_max and s_mean.
// Launch (FasterTransformer's rule): grid (q_len, batch, heads) with blockIdx.y the batch and blockIdx.z the head,
// but when batch * heads > 360 the grid's x shrinks to ceil(q_len / 32) and each block strides over the query rows;
// block = k_len rounded up to a warp, then divided by ITEMS_PER_THREAD = 4 (2049..4096 keys), 2 (1025..2048) or 1
// and rounded up to a warp again (three instantiations; spec = <__half, float, 4>, which holds every size set's row).
// Tolerance: probabilities are ~1/k_len and below, far under the f16 default atol of 1e-2, so atol is 1e-6.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cassert>
#include <cfloat>
#include <cmath>
#include <cstdint>

namespace fastertransformer {

#define FINAL_MASK 0xffffffff

__inline__ __device__ float warpReduceSum(float val) {
#pragma unroll
  for (int mask = 16; mask > 0; mask >>= 1) val += __shfl_xor_sync(FINAL_MASK, val, mask, 32);
  return val;
}

__inline__ __device__ float warpReduceMax(float val) {
#pragma unroll
  for (int mask = 16; mask > 0; mask >>= 1) val = fmaxf(val, __shfl_xor_sync(FINAL_MASK, val, mask, 32));
  return val;
}

__inline__ __device__ float blockReduceSum(float val) {
  static __shared__ float shared[32];
  const int lane = threadIdx.x & 0x1f;
  const int wid = threadIdx.x >> 5;
  val = warpReduceSum(val);
  if (lane == 0) shared[wid] = val;
  __syncthreads();
  val = (threadIdx.x < (blockDim.x >> 5)) ? shared[lane] : 0.0f;
  return warpReduceSum(val);
}

__inline__ __device__ float blockReduceMax(float val) {
  static __shared__ float shared[32];
  const int lane = threadIdx.x & 0x1f;
  const int wid = threadIdx.x >> 5;
  val = warpReduceMax(val);
  if (lane == 0) shared[wid] = val;
  __syncthreads();
  val = (threadIdx.x < (blockDim.x >> 5)) ? shared[lane] : -1e20f;
  return warpReduceMax(val);
}

/* kerntune:
args  = ["attn_score: out f16[batch * heads * q_len * k_len]", "qk: in f32[batch * heads * q_len * k_len]",
         "attn_mask: in f16[batch * q_len * k_len] ~ randint(0, 2)",
         "linear_bias_slopes: in f16[heads] ~ uniform(0.004, 0.5)", "batch_size: i32 = batch",
         "head_num: i32 = heads", "q_length: i32 = q_len", "k_length: i32 = k_len", "qk_scale: f32 = 0.0625"]
sizes = [{ batch = 4, heads = 32, q_len = 512, k_len = 512 }, { batch = 16, heads = 32, q_len = 1, k_len = 4096 },
         { batch = 3, heads = 5, q_len = 77, k_len = 1537 }]
grid  = ["q_len if batch * heads <= 360 else cdiv(q_len, 32)", "batch", "heads"]
block = "round_up(round_up(k_len, 32) / (4 if round_up(k_len, 32) > 2048 else 2 if round_up(k_len, 32) > 1024 else 1), 32)"
atol  = 1e-6
template_args = ["__half", "float", "4"]
*/
template <typename T, typename T_IN, int ITEMS_PER_THREAD>
__global__ void softmax_kernel(T* attn_score, const T_IN* qk, const T* attn_mask, const T* linear_bias_slopes,
                               const int batch_size, const int head_num, const int q_length, const int k_length,
                               const float qk_scale) {
  const int64_t bi = blockIdx.y;  // batch
  const int64_t hi = blockIdx.z;  // head
  __shared__ float s_mean, s_max;

  const float linear_bias_slope = linear_bias_slopes != nullptr ? (float)linear_bias_slopes[hi] : 0.0f;

  for (int64_t qi = blockIdx.x; qi < q_length; qi += gridDim.x) {
    float data[ITEMS_PER_THREAD];
    float local_max = -1e20f;

    for (int i = 0; blockDim.x * i + threadIdx.x < k_length && i < ITEMS_PER_THREAD; i++) {
      const int64_t ki = blockDim.x * i + threadIdx.x;
      const int64_t qk_offset = ((bi * head_num + hi) * q_length + qi) * k_length + ki;
      const float qk_val = static_cast<float>(qk[qk_offset]);
      float qk_bias = 0.0f;
      if (linear_bias_slopes != nullptr) {
        qk_bias += linear_bias_slope * static_cast<float>(ki - qi);
      }
      const int64_t mask_offset = (bi * q_length + qi) * k_length + ki;
      const float mask_val = static_cast<float>(__ldg(&attn_mask[mask_offset]));
      qk_bias += (1.0f - mask_val) * -10000.0f;
      data[i] = qk_scale * qk_val + qk_bias;
      local_max = fmaxf(local_max, data[i]);
    }

    const float max_val = blockDim.x <= 32 ? warpReduceMax(local_max) : blockReduceMax(local_max);
    if (threadIdx.x == 0) {
      s_max = max_val;
    }
    __syncthreads();

    float local_sum = 0.0f;
    for (int i = 0; blockDim.x * i + threadIdx.x < k_length && i < ITEMS_PER_THREAD; i++) {
      data[i] = __expf(data[i] - s_max);
      local_sum += data[i];
    }
    const float sum_val = blockDim.x <= 32 ? warpReduceSum(local_sum) : blockReduceSum(local_sum);
    if (threadIdx.x == 0) {
      s_mean = sum_val + 1e-6f;
      s_mean = __fdividef(1.0f, s_mean);
    }
    __syncthreads();

    for (int i = 0; blockDim.x * i + threadIdx.x < k_length && i < ITEMS_PER_THREAD; i++) {
      const int64_t qk_offset = ((bi * head_num + hi) * q_length + qi) * k_length + blockDim.x * i + threadIdx.x;
      attn_score[qk_offset] = (T)(data[i] * s_mean);
    }
  }
}

// attn_score: [batch, heads, q_len, k_len] fp16; qk: same shape, fp32; attn_mask: [batch, q_len, k_len] fp16 (1 keep,
// 0 masked); linear_bias_slopes: [heads] fp16 or null. Device pointers; k_len <= 4096.
void invokeMaskedSoftmax(__half* attn_score, const float* qk, const __half* attn_mask,
                         const __half* linear_bias_slopes, int batch_size, int num_heads, int q_length, int k_length,
                         float qk_scale, cudaStream_t stream) {
  dim3 grid(q_length, batch_size, num_heads);
  if (batch_size * num_heads > 360) {
    grid.x = ceil(float(q_length) / 32.0f);
  }
  dim3 block((k_length + 31) / 32 * 32);
  assert(block.x <= 4096);
#define LAUNCH_MASKED_SOFTMAX(ITEMS)                                                                            \
  block.x /= ITEMS;                                                                                             \
  block.x = (block.x + 31) / 32 * 32;                                                                           \
  softmax_kernel<__half, float, ITEMS><<<grid, block, 0, stream>>>(attn_score, qk, attn_mask, linear_bias_slopes, \
                                                                  batch_size, num_heads, q_length, k_length,    \
                                                                  qk_scale)
  if (block.x > 2048) {
    LAUNCH_MASKED_SOFTMAX(4);
  } else if (block.x > 1024) {
    LAUNCH_MASKED_SOFTMAX(2);
  } else {
    LAUNCH_MASKED_SOFTMAX(1);
  }
#undef LAUNCH_MASKED_SOFTMAX
}

}  // namespace fastertransformer
