// Fused residual add + RMSNorm in the style of Tencent KsanaLLM's LLM_kernels
// (3rdparty/LLM_kernels/csrc/kernels/nvidia/layernorm/layernorm.cu: InvokeAddResLayerNormKernel<T> behind
// InvokeAddResPreLayerNorm<T>, "layernorm module in the T5 style: no bias and no subtraction of mean"), bf16:
//   argument order input, gamma, output, norm_output, layernorm_eps, m, n; output [m, n] is the residual stream,
//   IN PLACE: output = input + output (the sum rounded to T through ClampInfForHalf, which clamps only for half and
//   is a plain cast for bf16), the sum of squares taken from the value READ BACK from global memory (the rounded
//   sum), then norm_output = T(output * rsqrt(var / n + eps) * gamma) with fp32 math and one rounding
//   one block per token, block min(n, 1024), 1024 when n % 32 != 0 ("since we have warp shuffle inside the code,
//   block.x % 32 should be 0"), FasterTransformer-style BlockReduceSum (xor-shuffle warp sums, __shared__ float[32],
//   the first warp sums them, thread 0 writes __shared__ s_variance, __syncthreads); __ldg on input and gamma;
//   namespace llm_kernels::nvidia, explicit template instantiations, int32_t sizes; stream from the caller
// No bug found: each thread re-reads only the residual elements it wrote itself.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cstdint>
#include <algorithm>

namespace llm_kernels {
namespace nvidia {

#define FINAL_MASK 0xffffffff

template <typename T>
__inline__ __device__ T WarpReduceSum(T val) {
#pragma unroll
  for (int32_t mask = 16; mask > 0; mask >>= 1) {
    val += __shfl_xor_sync(FINAL_MASK, val, mask, 32);
  }
  return val;
}

// Calculate the sum of all elements in a block
template <typename T>
__inline__ __device__ T BlockReduceSum(T val) {
  static __shared__ T shared[32];
  int32_t lane = threadIdx.x & 0x1f;
  int32_t wid = threadIdx.x >> 5;

  val = WarpReduceSum<T>(val);

  if (lane == 0) {
    shared[wid] = val;
  }
  __syncthreads();

  // blockDim.x is not divided by 32
  val = (threadIdx.x < (blockDim.x / 32.f)) ? shared[lane] : (T)(0.0f);
  val = WarpReduceSum<T>(val);

  return val;
}

template <typename T>
__device__ __forceinline__ T ClampInfForHalf(const float input) {
  return static_cast<T>(input);
}

template <>
__device__ __forceinline__ half ClampInfForHalf(const float input) {
  // clamp inf values to enable fp16 training
  return input > 0.0f ? __float2half(min(input, 65504.0f - 1000.0f)) : __float2half(max(input, -65504.0f + 1000.0f));
}

/* kerntune:
args  = ["input: in bf16[m * n]", "gamma: in bf16[n]", "output: inout bf16[m * n]", "norm_output: out bf16[m * n]",
         "layernorm_eps: f32 = 1e-6", "m: i32 = m", "n: i32 = n"]
sizes = [{ m = 8192, n = 4096 }, { m = 8, n = 5120 }, { m = 333, n = 2500 }]
grid  = "m"
block = "1024 if n % 32 != 0 else min(n, 1024)"
template_args = ["__nv_bfloat16"]
*/
template <typename T>
__global__ void InvokeAddResLayerNormKernel(const T* __restrict input, const T* __restrict gamma, T* output,
                                            T* norm_output, const float layernorm_eps, int32_t m, int32_t n) {
  // layernorm module in the T5 style No bias and no subtraction of mean.
  __shared__ float s_variance;
  float variance = 0.0f;

  float local_var_sum = 0.0f;
  for (int32_t i = threadIdx.x; i < n; i += blockDim.x) {
    output[blockIdx.x * n + i] =
        ClampInfForHalf<T>((float)__ldg(&input[blockIdx.x * n + i]) + (float)output[blockIdx.x * n + i]);

    float diff = (float)(output[blockIdx.x * n + i]);
    local_var_sum += diff * diff;
  }
  variance = BlockReduceSum(local_var_sum);

  if (threadIdx.x == 0) {
    s_variance = rsqrtf(variance / (float)n + layernorm_eps);
  }
  __syncthreads();

  for (int32_t i = threadIdx.x; i < n; i += blockDim.x) {
    norm_output[blockIdx.x * n + i] =
        ClampInfForHalf<T>((((float)output[blockIdx.x * n + i]) * s_variance) * (float)(__ldg(&gamma[i])));
  }
}

template <typename T>
void InvokeAddResPreLayerNorm(T* output, T* norm_output, const T* input, const T* gamma, const float layernorm_eps,
                              int32_t m, int32_t n, cudaStream_t stream) {
  dim3 grid(m);
  dim3 block(std::min(n, 1024));

  // For general cases, n is equal to hidden_units, e.g., 512/1024. Since we have warp shuffle inside the code,
  // block.x % 32 should be 0.
  if (n % 32 != 0) {
    block.x = 1024;
  }

  InvokeAddResLayerNormKernel<T><<<grid, block, 0, stream>>>(input, gamma, output, norm_output, layernorm_eps, m, n);
}

template void InvokeAddResPreLayerNorm(half* output, half* norm_output, const half* input, const half* gamma,
                                       const float layernorm_eps, int32_t m, int32_t n, cudaStream_t stream);
template void InvokeAddResPreLayerNorm(__nv_bfloat16* output, __nv_bfloat16* norm_output, const __nv_bfloat16* input,
                                       const __nv_bfloat16* gamma, const float layernorm_eps, int32_t m, int32_t n,
                                       cudaStream_t stream);

}  // namespace nvidia
}  // namespace llm_kernels
