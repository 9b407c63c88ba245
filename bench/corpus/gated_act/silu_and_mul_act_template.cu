// SiLU-and-mul (bf16) in the style of vLLM's csrc/activation_kernels.cu: one kernel template over the element
// type, the activation (a __device__ function passed as a template argument) and whether the activation applies
// to the first or the second half; one token per block, block = min(d, 1024), scalar __ldg loads. The activation
// result is rounded to the storage type and multiplied in it (operator* on __nv_bfloat16).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <algorithm>
#include <cstdint>

namespace serving {

template <typename T>
__device__ __forceinline__ T silu_kernel(const T& x) {
  // x * sigmoid(x)
  const float f = static_cast<float>(x);
  return static_cast<T>(f / (1.0f + expf(-f)));
}

template <typename scalar_t, scalar_t (*ACT_FN)(const scalar_t&), bool act_first>
__device__ __forceinline__ scalar_t compute(const scalar_t& x, const scalar_t& y) {
  return act_first ? ACT_FN(x) * y : x * ACT_FN(y);
}

/* kerntune:
args  = ["out: out bf16[tokens * d]", "input: in bf16[tokens * 2 * d]", "d: i32 = d"]
sizes = [{ tokens = 4096, d = 11008 }, { tokens = 32, d = 14336 }, { tokens = 1000, d = 4099 }]
grid  = "tokens"
block = "min(d, 1024)"
*/
template <typename scalar_t, scalar_t (*ACT_FN)(const scalar_t&), bool act_first>
__global__ void act_and_mul_kernel(scalar_t* __restrict__ out,          // [num_tokens, d]
                                   const scalar_t* __restrict__ input,  // [num_tokens, 2, d]
                                   const int d) {
  const int64_t token_idx = blockIdx.x;
  for (int64_t idx = threadIdx.x; idx < d; idx += blockDim.x) {
    const scalar_t x = __ldg(&input[token_idx * 2 * d + idx]);
    const scalar_t y = __ldg(&input[token_idx * 2 * d + d + idx]);
    out[token_idx * d + idx] = compute<scalar_t, ACT_FN, act_first>(x, y);
  }
}

}  // namespace serving

// out: [num_tokens, d], input: [num_tokens, 2 * d] (gate first, then up)
void silu_and_mul(__nv_bfloat16* out, const __nv_bfloat16* input, int num_tokens, int d, cudaStream_t stream) {
  dim3 grid(num_tokens);
  dim3 block(std::min(d, 1024));
  serving::act_and_mul_kernel<__nv_bfloat16, serving::silu_kernel<__nv_bfloat16>, true>
      <<<grid, block, 0, stream>>>(out, input, d);
}
