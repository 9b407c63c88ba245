// RMSNorm (bf16) over a non-contiguous input, as vLLM's rms_norm accepts it: consecutive token rows of the input
// are input_stride elements apart (input_stride >= hidden_size: the rows of a larger fused buffer, e.g. the
// [tokens, kv_lora_rank + rope_dim] output of an MLA down projection or a slice of a qkv buffer, normalized over
// their first hidden_size columns without a copy), while the output is contiguous [num_tokens, hidden_size].
// One token per block, block = min(hidden_size, 1024); the sum of squares is accumulated in fp32, reduced by warp
// shuffles and then across warps through a 32-float shared array (a partial last warp is handled with its own
// lane mask), and the reciprocal RMS is broadcast through a __shared__ float. x * rsqrt(mean + eps) is rounded to
// bf16 and then multiplied by the bf16 weight.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <algorithm>
#include <cstdint>

namespace vllm {

constexpr int kWarpSize = 32;

// Sum over the lanes of this thread's warp that exist (the block may end in a partial warp);
// the result is valid in lane 0.
__device__ __forceinline__ float warp_reduce_sum(float val, const int lanes) {
  const unsigned mask = lanes == kWarpSize ? 0xffffffffu : ((1u << lanes) - 1u);
  const int lane = threadIdx.x % kWarpSize;
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
    const float other = __shfl_down_sync(mask, val, offset);
    if (lane + offset < lanes) val += other;
  }
  return val;
}

// Block-wide sum; the result is valid in thread 0.
__device__ __forceinline__ float block_reduce_sum(float val) {
  __shared__ float warp_sums[kWarpSize];
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int num_warps = (blockDim.x + kWarpSize - 1) / kWarpSize;
  const int lanes = min(kWarpSize, static_cast<int>(blockDim.x) - warp * kWarpSize);

  val = warp_reduce_sum(val, lanes);
  if (lane == 0) warp_sums[warp] = val;
  __syncthreads();
  if (warp == 0) {
    val = lane < num_warps ? warp_sums[lane] : 0.0f;
    val = warp_reduce_sum(val, lanes);
  }
  return val;
}

/* kerntune:
args  = ["out: out bf16[num_tokens * hidden_size]", "input: in bf16[num_tokens * input_stride]",
         "weight: in bf16[hidden_size]", "epsilon: f32 = 1e-6", "input_stride: i64 = input_stride",
         "hidden_size: i32 = hidden_size"]
sizes = [{ num_tokens = 8192, hidden_size = 4096, input_stride = 4352 },
         { num_tokens = 8, hidden_size = 512, input_stride = 576 },
         { num_tokens = 1001, hidden_size = 5123, input_stride = 15369 }]
grid  = "num_tokens"
block = "min(hidden_size, 1024)"
*/
__global__ void rms_norm_strided_kernel(__nv_bfloat16* __restrict__ out,           // [num_tokens, hidden_size]
                                        const __nv_bfloat16* __restrict__ input,   // [num_tokens, input_stride]
                                        const __nv_bfloat16* __restrict__ weight,  // [hidden_size]
                                        const float epsilon, const int64_t input_stride, const int hidden_size) {
  __shared__ float s_inv_rms;
  const __nv_bfloat16* in_row = input + blockIdx.x * input_stride;
  __nv_bfloat16* out_row = out + static_cast<int64_t>(blockIdx.x) * hidden_size;

  float sum_sq = 0.0f;
  for (int idx = threadIdx.x; idx < hidden_size; idx += blockDim.x) {
    const float x = __bfloat162float(in_row[idx]);
    sum_sq += x * x;
  }
  sum_sq = block_reduce_sum(sum_sq);
  if (threadIdx.x == 0) {
    s_inv_rms = rsqrtf(sum_sq / static_cast<float>(hidden_size) + epsilon);
  }
  __syncthreads();

  const float inv_rms = s_inv_rms;
  for (int idx = threadIdx.x; idx < hidden_size; idx += blockDim.x) {
    const float x = __bfloat162float(in_row[idx]);
    out_row[idx] = __hmul(__float2bfloat16(x * inv_rms), weight[idx]);
  }
}

}  // namespace vllm

// out: [num_tokens, hidden_size] contiguous; input: num_tokens rows input_stride elements apart, of which the
// first hidden_size are normalized; weight: [hidden_size].
void rms_norm_strided(__nv_bfloat16* out, const __nv_bfloat16* input, const __nv_bfloat16* weight, float epsilon,
                      int64_t num_tokens, int64_t input_stride, int hidden_size, cudaStream_t stream) {
  if (num_tokens == 0 || hidden_size == 0) return;
  const dim3 grid(static_cast<unsigned>(num_tokens));
  const dim3 block(std::min(hidden_size, 1024));
  vllm::rms_norm_strided_kernel<<<grid, block, 0, stream>>>(out, input, weight, epsilon, input_stride,
                                                            hidden_size);
}
