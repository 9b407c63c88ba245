// RMSNorm (bf16) in the style of vLLM's csrc/layernorm_kernels.cu: a kernel template over the element type, one
// token per block, block = min(hidden_size, 1024), a block-wide sum built from warp shuffles and a 32-entry shared
// array, the reciprocal RMS broadcast through a __shared__ float. The normalized value is rounded to the storage
// type and then multiplied by the weight in it: out = (scalar_t)(x * inv_rms) * weight.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <algorithm>
#include <cstdint>

namespace llm {

// Every warp must be full: the launcher uses min(hidden_size, 1024) threads, and hidden sizes are >= 1024.
template <typename T>
__inline__ __device__ T warpReduceSum(T val) {
#pragma unroll
  for (int mask = 16; mask > 0; mask >>= 1) val += __shfl_xor_sync(0xffffffff, val, mask, 32);
  return val;
}

template <typename T>
__inline__ __device__ T blockReduceSum(T val) {
  static __shared__ T shared[32];
  const int lane = threadIdx.x & 0x1f;
  const int wid = threadIdx.x >> 5;
  val = warpReduceSum<T>(val);
  if (lane == 0) shared[wid] = val;
  __syncthreads();
  val = (threadIdx.x < (blockDim.x / 32.f)) ? shared[lane] : (T)(0.0f);
  val = warpReduceSum<T>(val);
  return val;
}

/* kerntune:
args  = ["out: out bf16[num_tokens * hidden_size]", "input: in bf16[num_tokens * hidden_size]",
         "weight: in bf16[hidden_size]", "epsilon: f32 = 1e-6", "num_tokens: i32 = num_tokens",
         "hidden_size: i32 = hidden_size"]
sizes = [{ num_tokens = 8192, hidden_size = 4096 }, { num_tokens = 16, hidden_size = 8192 },
         { num_tokens = 1000, hidden_size = 5123 }]
grid  = "num_tokens"
block = "min(hidden_size, 1024)"
*/
template <typename scalar_t>
__global__ void rms_norm_kernel(scalar_t* __restrict__ out,           // [..., hidden_size]
                                const scalar_t* __restrict__ input,   // [..., hidden_size]
                                const scalar_t* __restrict__ weight,  // [hidden_size]
                                const float epsilon, const int num_tokens, const int hidden_size) {
  __shared__ float s_variance;
  float variance = 0.0f;
  for (int idx = threadIdx.x; idx < hidden_size; idx += blockDim.x) {
    const float x = (float)input[(int64_t)blockIdx.x * hidden_size + idx];
    variance += x * x;
  }
  variance = blockReduceSum<float>(variance);
  if (threadIdx.x == 0) {
    s_variance = rsqrtf(variance / hidden_size + epsilon);
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < hidden_size; idx += blockDim.x) {
    const float x = (float)input[(int64_t)blockIdx.x * hidden_size + idx];
    out[(int64_t)blockIdx.x * hidden_size + idx] = ((scalar_t)(x * s_variance)) * weight[idx];
  }
}

}  // namespace llm

void rms_norm(__nv_bfloat16* out, const __nv_bfloat16* input, const __nv_bfloat16* weight, float epsilon,
              int num_tokens, int hidden_size, cudaStream_t stream) {
  dim3 grid(num_tokens);
  dim3 block(std::min(hidden_size, 1024));
  llm::rms_norm_kernel<__nv_bfloat16><<<grid, block, 0, stream>>>(out, input, weight, epsilon, num_tokens,
                                                                  hidden_size);
}
