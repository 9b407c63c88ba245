// LayerNorm (bf16) in the style of TensorRT-LLM's generalLayerNorm: one token per block, block = min(hidden_dim,
// 1024) rounded up to a warp, the sum and the sum of squares gathered in one pass and reduced together (variance
// as E[x^2] - mean^2), mean and 1/std broadcast through __shared__ floats, fp32 math with one cast at the store.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <algorithm>

namespace kernels {

template <typename T>
__inline__ __device__ T warpReduceSum(T val) {
#pragma unroll
  for (int mask = 16; mask > 0; mask >>= 1) val += __shfl_xor_sync(0xffffffff, val, mask, 32);
  return val;
}

// Reduces two values at once (sum, sum of squares); every thread gets both totals.
__inline__ __device__ float2 blockReduceSum2(float2 v) {
  __shared__ float shared[2][32];
  const int lane = threadIdx.x & 0x1f;
  const int wid = threadIdx.x >> 5;
  v.x = warpReduceSum(v.x);
  v.y = warpReduceSum(v.y);
  if (lane == 0) {
    shared[0][wid] = v.x;
    shared[1][wid] = v.y;
  }
  __syncthreads();
  const bool have = lane < (blockDim.x >> 5);
  v.x = warpReduceSum(have ? shared[0][lane] : 0.f);
  v.y = warpReduceSum(have ? shared[1][lane] : 0.f);
  return v;
}

/* kerntune:
args  = ["input: in bf16[tokens * hidden_dim]", "gamma: in bf16[hidden_dim]", "beta: in bf16[hidden_dim]",
         "normed_output: out bf16[tokens * hidden_dim]", "eps: f32 = 1e-5", "tokens: i32 = tokens",
         "hidden_dim: i32 = hidden_dim"]
sizes = [{ tokens = 8192, hidden_dim = 4096 }, { tokens = 16, hidden_dim = 12288 }, { tokens = 999, hidden_dim = 2887 }]
grid  = "tokens"
block = "round_up(min(hidden_dim, 1024), 32)"
*/
template <typename T>
__global__ void generalLayerNorm(const T* input, const T* gamma, const T* beta, T* normed_output, const float eps,
                                 int tokens, int hidden_dim) {
  const int tidx = threadIdx.x;
  const int bidx = blockIdx.x;
  __shared__ float s_mean;
  __shared__ float s_variance;

  float2 local = make_float2(0.f, 0.f);
  for (int i = tidx; i < hidden_dim; i += blockDim.x) {
    const float val = __bfloat162float(input[(size_t)bidx * hidden_dim + i]);
    local.x += val;
    local.y += val * val;
  }
  const float2 sums = blockReduceSum2(local);
  if (threadIdx.x == 0) {
    const float mean = sums.x / hidden_dim;
    const float variance = sums.y / hidden_dim - mean * mean;
    s_mean = mean;
    s_variance = rsqrtf(variance + eps);
  }
  __syncthreads();

  const float mean = s_mean;
  const float rstd = s_variance;
  for (int i = tidx; i < hidden_dim; i += blockDim.x) {
    const float val = __bfloat162float(input[(size_t)bidx * hidden_dim + i]);
    const float g = __bfloat162float(gamma[i]);
    const float b = __bfloat162float(beta[i]);
    normed_output[(size_t)bidx * hidden_dim + i] = __float2bfloat16((val - mean) * rstd * g + b);
  }
}

}  // namespace kernels

void invokeGeneralLayerNorm(__nv_bfloat16* out, const __nv_bfloat16* input, const __nv_bfloat16* gamma,
                            const __nv_bfloat16* beta, const float eps, const int tokens, const int hidden_dim,
                            cudaStream_t stream) {
  dim3 grid(tokens);
  dim3 block(std::min(hidden_dim, 1024));
  // Make sure block.x is multiple of 32 for warp shuffle to work
  block.x = 32 * ((block.x + 31) / 32);
  kernels::generalLayerNorm<__nv_bfloat16><<<grid, block, 0, stream>>>(input, gamma, beta, out, eps, tokens,
                                                                       hidden_dim);
}
