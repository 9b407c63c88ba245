// RMSNorm as AutoAWQ's awq_ext (csrc/layernorm) carries it over from FasterTransformer's T5 layer norm
// (generalT5LayerNorm: "T5LayerNorm" is RMSNorm, no mean and no bias), used for Llama / Mistral RMSNorm in fp16:
//   s_variance = rsqrtf(sum(x^2) / n + eps)                     (one thread's __shared__ value)
//   out        = clamp_inf_for_half((float(x) * s_variance) * float(gamma))
// where clamp_inf_for_half keeps fp16 activations finite by clamping to +-(HALF_FLT_MAX - 1000) before the
// rounding (T5 / fp16 overflow guard), fp32 math and one rounding.
// FasterTransformer's shape: argument order (input, gamma, output, eps, m, n), __ldg loads, blockReduceSum
// (xor-butterfly warp sums through a __shared__ float[32], summed again by warp 0), one row per block; the host
// launches block min(n, 1024) (1024 when n is not a multiple of 32) and halves it for 2-byte types
// (half as many threads, each taking twice the columns), the threads striding the row by blockDim.x.
#include <cuda_runtime.h>
#include <cuda_fp16.h>

#define HALF_FLT_MAX 65504.F
#define FINAL_MASK 0xffffffff

namespace awq_ext {

template <typename T>
__device__ __forceinline__ T clamp_inf_for_half(const float input) {
  return input;
}

template <>
__device__ __forceinline__ half clamp_inf_for_half(const float input) {
  // keep the fp16 result finite: saturate 1000 below the largest half
  return input > 0.0f ? __float2half(min(input, HALF_FLT_MAX - 1000)) : __float2half(max(input, -HALF_FLT_MAX + 1000));
}

template <typename T>
__inline__ __device__ T warpReduceSum(T val) {
#pragma unroll
  for (int mask = 16; mask > 0; mask >>= 1) val += __shfl_xor_sync(FINAL_MASK, val, mask, 32);
  return val;
}

// Block sum: warp sums into shared[wid], then warp 0 sums the warp sums (the result is valid in warp 0).
template <typename T>
__inline__ __device__ T blockReduceSum(T val) {
  static __shared__ T shared[32];
  int lane = threadIdx.x & 0x1f;
  int wid = threadIdx.x >> 5;

  val = warpReduceSum<T>(val);

  if (lane == 0) shared[wid] = val;

  __syncthreads();

  // a float comparison so that a block that is not a whole number of warps still counts its last warp
  val = (threadIdx.x < (blockDim.x / 32.f)) ? shared[lane] : (T)(0.0f);
  val = warpReduceSum<T>(val);
  return val;
}

// Default fp16 tolerance: one rounding at the store; the clamp is never reached by normal(0, 1) activations.
/* kerntune:
args  = ["input: in f16[m * n]", "gamma: in f16[n]", "output: out f16[m * n]", "layernorm_eps: f32 = 1e-6",
         "m: i32 = m", "n: i32 = n"]
sizes = [{ m = 8192, n = 4096 }, { m = 4, n = 8192 }, { m = 333, n = 5003 }]
grid  = "m"
block = "(1024 if n % 32 != 0 else min(n, 1024)) / 2"
*/
template <typename T>
__global__ void generalT5LayerNorm(const T* __restrict input, const T* __restrict gamma, T* output,
                                   const float layernorm_eps, int m, int n) {
  // T5-style: the root mean square only, no mean removed and no bias added.
  const int tid = threadIdx.x;

  __shared__ float s_variance;
  float variance = 0.0f;

  float local_var_sum = 0.0f;
  for (int i = tid; i < n; i += blockDim.x) {
    float diff = (float)(__ldg(&input[blockIdx.x * n + i]));
    local_var_sum += diff * diff;
  }
  variance = blockReduceSum(local_var_sum);

  if (threadIdx.x == 0) {
    s_variance = rsqrtf(variance / (float)n + layernorm_eps);
  }
  __syncthreads();

  for (int i = tid; i < n; i += blockDim.x) {
    output[blockIdx.x * n + i] =
        clamp_inf_for_half<T>((((float)input[blockIdx.x * n + i]) * s_variance) * (float)(__ldg(&gamma[i])));
  }
}

template <typename T>
void invokeGeneralT5LayerNorm(T* out, const T* input, const T* gamma, const float layernorm_eps, int m, int n,
                              cudaStream_t stream) {
  dim3 grid(m);
  dim3 block(min(n, 1024));

  // the reduction shuffles whole warps: a row length that is not a multiple of 32 gets the full 1024
  if (n % 32 != 0) {
    block.x = 1024;
  }

  block.x = block.x / (4 / sizeof(T));  // 2-byte types: half the threads, each striding twice as far

  generalT5LayerNorm<T><<<grid, block, 0, stream>>>(input, gamma, out, layernorm_eps, m, n);
}

template void invokeGeneralT5LayerNorm(half* out, const half* input, const half* gamma, const float layernorm_eps,
                                       int m, int n, cudaStream_t stream);

}  // namespace awq_ext
