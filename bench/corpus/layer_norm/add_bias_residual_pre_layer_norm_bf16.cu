// Pre-LN residual step of a GPT-style decoder (GPT-J / GPT-NeoX / OPT served by FasterTransformer), written in the
// way FasterTransformer's general add-bias-residual pre-LayerNorm kernel is: the residual stream `output` [m, n]
// is updated IN PLACE with the attention (or MLP) output `input` and its bias, and the LayerNorm of the updated
// row goes to a separate `norm_output` for the next block:
//   output      = bf16(input + output + bias)      (added in fp32, one rounding; bias nullable)
//   norm_output = bf16((output - mean) * rsqrt(var + 1e-6) * gamma + beta)   (beta nullable)
// mean and the exact centered variance come from the ROUNDED sum re-read from global memory (three passes: add and
// sum, centered squares, normalize), each reduced by blockReduceSum (xor-shuffle warp sums, a static __shared__
// float[32] of warp partials, warp 0 reducing them), thread 0 publishing s_mean and s_variance. eps is the literal
// 1e-6 inside the kernel (no argument). Launch as the FasterTransformer host code computes it: grid m, block
// min(n, 1024), or 1024 when n is not a multiple of 32, then halved for a 2-byte type ("half of block.x is enough
// for half"), although the kernel stays scalar: bf16 rows of 6144 get 512 threads.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <algorithm>
#include <cstdint>

namespace fastertransformer {

#define FINAL_MASK 0xffffffff

template <typename T>
__inline__ __device__ T warpReduceSum(T val) {
#pragma unroll
  for (int mask = 16; mask > 0; mask >>= 1) {
    val += __shfl_xor_sync(FINAL_MASK, val, mask, 32);
  }
  return val;
}

template <typename T>
__inline__ __device__ T blockReduceSum(T val) {
  static __shared__ T shared[32];
  const int lane = threadIdx.x & 0x1f;
  const int wid = threadIdx.x >> 5;
  val = warpReduceSum<T>(val);
  if (lane == 0) {
    shared[wid] = val;
  }
  __syncthreads();
  // blockDim.x / 32.f: a partial last warp still has its slot
  val = (threadIdx.x < (blockDim.x / 32.f)) ? shared[lane] : (T)0.0f;
  val = warpReduceSum<T>(val);
  return val;
}

/* kerntune:
args  = ["input: in bf16[m * n]", "gamma: in bf16[n]", "beta: in bf16[n]", "bias: in bf16[n]",
         "output: inout bf16[m * n]", "norm_output: out bf16[m * n]", "m: i32 = m", "n: i32 = n"]
sizes = [{ m = 8192, n = 6144 }, { m = 8, n = 4096 }, { m = 37, n = 2561 }]
grid  = "m"
block = "(1024 if n % 32 != 0 else min(n, 1024)) / 2"
template_args = ["__nv_bfloat16"]
*/
template <typename T>
__global__ void generalAddBiasResidualLayerNorm(const T* __restrict__ input, const T* __restrict__ gamma,
                                                const T* __restrict__ beta, const T* __restrict__ bias, T* output,
                                                T* norm_output, int m, int n) {
  const int tid = threadIdx.x;
  __shared__ float s_mean;
  __shared__ float s_variance;
  float mean = 0.0f;
  float variance = 0.0f;

  const int64_t row = static_cast<int64_t>(blockIdx.x) * n;
  float local_sum = 0.0f;
  for (int i = tid; i < n; i += blockDim.x) {
    float local_out = (float)(__ldg(&input[row + i]));
    local_out += (float)(output[row + i]);
    if (bias != nullptr) {
      local_out += (float)(__ldg(&bias[i]));
    }
    output[row + i] = (T)local_out;
    local_sum += local_out;
  }
  mean = blockReduceSum<float>(local_sum);
  if (threadIdx.x == 0) {
    s_mean = mean / n;
  }
  __syncthreads();

  float local_var_sum = 0.0f;
  for (int i = tid; i < n; i += blockDim.x) {
    const float diff = (float)(output[row + i]) - s_mean;
    local_var_sum += diff * diff;
  }
  variance = blockReduceSum<float>(local_var_sum);
  if (threadIdx.x == 0) {
    s_variance = rsqrtf(variance / n + 1e-6f);
  }
  __syncthreads();

  for (int i = tid; i < n; i += blockDim.x) {
    const float beta_val = (beta == nullptr) ? 0.0f : (float)(__ldg(&beta[i]));
    norm_output[row + i] =
        (T)((((float)output[row + i] - s_mean) * s_variance) * (float)(__ldg(&gamma[i])) + beta_val);
  }
}

// output: [m, n] bf16 residual stream, updated; norm_output: [m, n] bf16; input: [m, n] bf16; gamma: [n] bf16;
// beta, bias: [n] bf16 or null. Device pointers.
template <typename T>
void invokeGeneralAddBiasResidualPreLayerNorm(T* output, T* norm_output, const T* input, const T* gamma,
                                              const T* beta, const T* bias, int m, int n, cudaStream_t stream) {
  dim3 grid(m);
  dim3 block(std::min(n, 1024));
  // the block reduction shuffles whole warps: a row that is not a multiple of 32 gets the full 1024
  if (n % 32 != 0) {
    block.x = 1024;
  }
  block.x = block.x / (4 / sizeof(T));  // a 2-byte type needs half the threads
  generalAddBiasResidualLayerNorm<T><<<grid, block, 0, stream>>>(input, gamma, beta, bias, output, norm_output, m, n);
}

template void invokeGeneralAddBiasResidualPreLayerNorm<__nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*,
                                                                      const __nv_bfloat16*, const __nv_bfloat16*,
                                                                      const __nv_bfloat16*, const __nv_bfloat16*, int,
                                                                      int, cudaStream_t);

}  // namespace fastertransformer
