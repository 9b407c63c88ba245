// Fused residual add + RMSNorm as ScaleLLM writes it (src/kernels/layernorm_kernels.cu, rms_norm_residual_kernel,
// with the FasterTransformer-derived block_reduce_sum of reduce_kernel_utils.cuh):
//   x = residual + input (fp32)      residual = T(x)      (in place, the residual stream updated)
//   s = rsqrtf(sum(x^2) / n + epsilon)                   the sum of squares of the UNROUNDED fp32 sums
//   out = T(residual * s) * weight                        the ROUNDED residual re-read, rounded to T, then a T
//                                                          multiply by the weight (Llama's x.to(dtype) * w)
// ScaleLLM's conventions: outputs first (out, residual, input, weight, epsilon, n), __restrict__ on every pointer,
// int64_t n and int64_t loop indices, one token per block (grid = rows) with block = std::min<int>(n, 1024),
// `const auto tidx = threadIdx.x` locals, a __shared__ float s_variance holding the inverse rms (thread 0), the
// kernel a template over the element type dispatched by the torch op (here a templated launcher instantiated for
// bf16), in namespace llm::kernel.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <algorithm>
#include <cstdint>

namespace llm::kernel {

constexpr unsigned FINAL_MASK = 0xffffffff;

template <typename T>
__inline__ __device__ T warp_reduce_sum(T val) {
#pragma unroll
  for (int mask = 16; mask > 0; mask >>= 1) {
    val += __shfl_xor_sync(FINAL_MASK, val, mask, 32);
  }
  return val;
}

// sum over the block; every thread gets the total
template <typename T>
__inline__ __device__ T block_reduce_sum(T val) {
  static __shared__ T shared[32];
  int lane = threadIdx.x & 0x1f;
  int wid = threadIdx.x >> 5;

  val = warp_reduce_sum<T>(val);
  if (lane == 0) {
    shared[wid] = val;
  }
  __syncthreads();

  // blockDim.x / 32.f: a block that is not a multiple of 32 still counts its last warp
  val = (threadIdx.x < (blockDim.x / 32.f)) ? shared[lane] : (T)(0.0f);
  val = warp_reduce_sum<T>(val);
  return val;
}

/* kerntune:
args  = ["out: out bf16[tokens * n]", "residual: inout bf16[tokens * n]", "input: in bf16[tokens * n]",
         "weight: in bf16[n]", "epsilon: f32 = 1e-5", "n: i64 = n"]
sizes = [{ tokens = 8192, n = 4096 }, { tokens = 8, n = 5120 }, { tokens = 999, n = 5123 }]
grid  = "tokens"
block = "min(n, 1024)"
template_args = ["__nv_bfloat16"]
*/
template <typename T>
__global__ void rms_norm_residual_kernel(T* __restrict__ out,
                                         T* __restrict__ residual,
                                         const T* __restrict__ input,
                                         const T* __restrict__ weight,
                                         const float epsilon,
                                         int64_t n) {
  const auto tidx = threadIdx.x;
  const auto bidx = blockIdx.x;

  __shared__ float s_variance;
  float variance = 0.0f;

  for (int64_t i = tidx; i < n; i += blockDim.x) {
    const int64_t idx = bidx * n + i;
    const float r = residual[idx];
    const float x = r + (float)input[idx];
    residual[idx] = (T)x;
    variance += x * x;
  }
  variance = block_reduce_sum<float>(variance);
  if (tidx == 0) {
    s_variance = rsqrtf(variance / n + epsilon);
  }
  __syncthreads();

  for (int64_t i = tidx; i < n; i += blockDim.x) {
    const int64_t idx = bidx * n + i;
    const float x = residual[idx];
    out[idx] = (T)(x * s_variance) * weight[i];
  }
}

// out = rms_norm(residual + input) * weight, residual updated in place; all [n_tokens, n] contiguous, device
// pointers.
template <typename T>
void rms_norm_residual(T* out, T* residual, const T* input, const T* weight, float epsilon, int64_t n_tokens,
                       int64_t n, cudaStream_t stream) {
  dim3 grid(n_tokens);
  dim3 block(std::min<int>(n, 1024));
  rms_norm_residual_kernel<T><<<grid, block, 0, stream>>>(out, residual, input, weight, epsilon, n);
}

template void rms_norm_residual<__nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, const __nv_bfloat16*,
                                               const __nv_bfloat16*, float, int64_t, int64_t, cudaStream_t);

}  // namespace llm::kernel
