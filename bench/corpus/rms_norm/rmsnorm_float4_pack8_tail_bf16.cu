// RMSNorm (bf16) in the style of TensorRT-LLM / lightllm hand-vectorized norm kernels: one token per block, the
// block size read back as `num_threads = blockDim.x` and used as the loop stride, rows read and written 16 bytes
// at a time through reinterpret_cast<const float4*> (8 bf16 per pack, unpacked as four __nv_bfloat162), and a
// scalar loop for what the packs do not cover. Packs are used only when hidden_dim % 8 == 0 (then every row starts
// 16-byte aligned); otherwise the whole row goes through the scalar loop. Warp shuffles plus a 32-float shared
// array for the block sum; two passes over global memory; fp32 math, one rounding at the store:
// out = bf16(x * inv_rms * gamma).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <algorithm>
#include <cstdint>

namespace kernels {

static constexpr int kPackSize = 8;  // bf16 elements in one float4

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// The block is a whole number of warps (the launcher rounds it up to 32).
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  v = warp_sum(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = (threadIdx.x < (blockDim.x >> 5)) ? partial[lane] : 0.f;
  if (warp == 0) v = warp_sum(v);
  return v;
}

/* kerntune:
args  = ["output: out bf16[tokens * hidden_dim]", "input: in bf16[tokens * hidden_dim]", "gamma: in bf16[hidden_dim]",
         "eps: f32 = 1e-6", "tokens: i32 = tokens", "hidden_dim: i32 = hidden_dim"]
sizes = [{ tokens = 8192, hidden_dim = 5120 }, { tokens = 4, hidden_dim = 8192 }, { tokens = 997, hidden_dim = 4099 }]
grid  = "tokens"
block = "min(1024, cdiv(hidden_dim / 8 if hidden_dim % 8 == 0 else hidden_dim, 32) * 32)"
*/
__global__ void rmsnorm_pack8_kernel(__nv_bfloat16* __restrict__ output, const __nv_bfloat16* __restrict__ input,
                                     const __nv_bfloat16* __restrict__ gamma, const float eps, const int tokens,
                                     const int hidden_dim) {
  const int tid = threadIdx.x;
  const int num_threads = blockDim.x;
  const int64_t row_offset = (int64_t)blockIdx.x * hidden_dim;
  const __nv_bfloat16* x = input + row_offset;
  __nv_bfloat16* y = output + row_offset;

  const int num_packs = (hidden_dim % kPackSize == 0) ? hidden_dim / kPackSize : 0;
  const int tail_start = num_packs * kPackSize;

  float sum_sq = 0.f;
  for (int p = tid; p < num_packs; p += num_threads) {
    const float4 packed = reinterpret_cast<const float4*>(x)[p];
    const __nv_bfloat162* h2 = reinterpret_cast<const __nv_bfloat162*>(&packed);
#pragma unroll
    for (int k = 0; k < kPackSize / 2; ++k) {
      const float2 f = __bfloat1622float2(h2[k]);
      sum_sq += f.x * f.x + f.y * f.y;
    }
  }
  for (int i = tail_start + tid; i < hidden_dim; i += num_threads) {
    const float f = __bfloat162float(x[i]);
    sum_sq += f * f;
  }

  __shared__ float s_inv_rms;
  sum_sq = block_sum(sum_sq);
  if (tid == 0) s_inv_rms = rsqrtf(sum_sq / (float)hidden_dim + eps);
  __syncthreads();
  const float inv_rms = s_inv_rms;

  for (int p = tid; p < num_packs; p += num_threads) {
    const float4 packed = reinterpret_cast<const float4*>(x)[p];
    const float4 packed_g = reinterpret_cast<const float4*>(gamma)[p];
    const __nv_bfloat162* h2 = reinterpret_cast<const __nv_bfloat162*>(&packed);
    const __nv_bfloat162* g2 = reinterpret_cast<const __nv_bfloat162*>(&packed_g);
    float4 result;
    __nv_bfloat162* r2 = reinterpret_cast<__nv_bfloat162*>(&result);
#pragma unroll
    for (int k = 0; k < kPackSize / 2; ++k) {
      const float2 f = __bfloat1622float2(h2[k]);
      const float2 g = __bfloat1622float2(g2[k]);
      r2[k] = __floats2bfloat162_rn(f.x * inv_rms * g.x, f.y * inv_rms * g.y);
    }
    reinterpret_cast<float4*>(y)[p] = result;
  }
  for (int i = tail_start + tid; i < hidden_dim; i += num_threads) {
    y[i] = __float2bfloat16(__bfloat162float(x[i]) * inv_rms * __bfloat162float(gamma[i]));
  }
}

}  // namespace kernels

void invokeRmsNormBf16(__nv_bfloat16* output, const __nv_bfloat16* input, const __nv_bfloat16* gamma, float eps,
                       int tokens, int hidden_dim, cudaStream_t stream) {
  // one thread per 16-byte pack when the row is packable, else one per element; whole warps, at most 1024
  const int work = (hidden_dim % kernels::kPackSize == 0) ? hidden_dim / kernels::kPackSize : hidden_dim;
  dim3 block(std::min(1024, (work + 31) / 32 * 32));
  dim3 grid(tokens);
  kernels::rmsnorm_pack8_kernel<<<grid, block, 0, stream>>>(output, input, gamma, eps, tokens, hidden_dim);
}
