// FATReLU-and-mul (vLLM's fatrelu_and_mul, MiniCPM / ProSparse): out = (x > threshold ? x : 0) * y with the
// threshold a float argument, [x | y] halves of each 2 * d row, bf16, the activation returned in bf16 and the
// product taken in bf16 (one rounding each). One token per block of min(d, 1024) threads.
#include <cuda_bf16.h>
#include <algorithm>
#include <cstdint>

template <typename scalar_t>
__device__ __forceinline__ scalar_t fatrelu(const scalar_t& x, const float threshold) {
  const float f = (float)x;
  return (scalar_t)(f > threshold ? f : 0.0f);
}

/* kerntune:
args  = ["out: out bf16[num_tokens * d]", "input: in bf16[num_tokens * 2 * d]", "d: i32 = d",
         "threshold: f32 = 0.25"]
sizes = [{ num_tokens = 512, d = 11008 }, { num_tokens = 9, d = 1001 }]
grid  = "num_tokens"
block = "min(d, 1024)"
*/
template <typename scalar_t>
__global__ void fatrelu_and_mul_kernel(scalar_t* __restrict__ out, const scalar_t* __restrict__ input, const int d,
                                       const float threshold) {
  const int64_t token_idx = blockIdx.x;
  for (int64_t idx = threadIdx.x; idx < d; idx += blockDim.x) {
    const scalar_t x = input[token_idx * 2 * d + idx];
    const scalar_t y = input[token_idx * 2 * d + d + idx];
    out[token_idx * d + idx] = fatrelu(x, threshold) * y;
  }
}

void fatrelu_and_mul(__nv_bfloat16* out, const __nv_bfloat16* input, int num_tokens, int d, float threshold,
                     cudaStream_t stream) {
  fatrelu_and_mul_kernel<__nv_bfloat16><<<num_tokens, std::min(d, 1024), 0, stream>>>(out, input, d, threshold);
}
