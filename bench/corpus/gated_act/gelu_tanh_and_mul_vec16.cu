// GELU(tanh)-and-mul (fp16) in the style of FlashInfer's include/flashinfer/activation.cuh: the activation is a
// float -> float __device__ function passed as a template argument, each thread handles 16-byte vectors (8 halves)
// with the arithmetic in fp32 and a single rounding at the store, one token per block, block = min(d / 8, 1024).
// A row whose length is not a multiple of 8 is not 16-byte aligned in the [tokens, 2 * d] buffer, so such rows go
// through the scalar loop instead.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <algorithm>
#include <cstdint>

namespace activation {

__device__ __forceinline__ float gelu_tanh(const float& val) {
  const float kAlpha = 0.7978845608028654f;  // sqrt(2 / pi)
  const float cdf = 0.5f * (1.0f + tanhf(kAlpha * (val + 0.044715f * val * val * val)));
  return val * cdf;
}

/* kerntune:
args  = ["out: out f16[tokens * d]", "input: in f16[tokens * 2 * d]", "d: i32 = d"]
sizes = [{ tokens = 4096, d = 14336 }, { tokens = 64, d = 13824 }, { tokens = 999, d = 5003 }]
grid  = "tokens"
block = "min(d / 8, 1024)"
*/
template <typename T, float (*Activation)(const float&)>
__global__ void act_and_mul_kernel(T* __restrict__ out, const T* __restrict__ input, const int d) {
  constexpr int vec_size = 16 / sizeof(T);
  const int64_t token_idx = blockIdx.x;
  const int64_t thread_idx = threadIdx.x;
  const int64_t stride = blockDim.x;
  const int64_t offset = token_idx * 2 * d;

  if (d % vec_size == 0) {
    const uint4* x_vec = reinterpret_cast<const uint4*>(input + offset);
    const uint4* y_vec = reinterpret_cast<const uint4*>(input + offset + d);
    uint4* o_vec = reinterpret_cast<uint4*>(out + token_idx * d);
    for (int64_t idx = thread_idx; idx < d / vec_size; idx += stride) {
      const uint4 xv = x_vec[idx];
      const uint4 yv = y_vec[idx];
      uint4 ov;
      const T* xs = reinterpret_cast<const T*>(&xv);
      const T* ys = reinterpret_cast<const T*>(&yv);
      T* os = reinterpret_cast<T*>(&ov);
#pragma unroll
      for (int i = 0; i < vec_size; ++i) {
        os[i] = static_cast<T>(Activation(static_cast<float>(xs[i])) * static_cast<float>(ys[i]));
      }
      o_vec[idx] = ov;
    }
  } else {
    for (int64_t idx = thread_idx; idx < d; idx += stride) {
      const float x = static_cast<float>(input[offset + idx]);
      const float y = static_cast<float>(input[offset + d + idx]);
      out[token_idx * d + idx] = static_cast<T>(Activation(x) * y);
    }
  }
}

}  // namespace activation

void gelu_tanh_and_mul(__half* out, const __half* input, int num_tokens, int d, cudaStream_t stream) {
  constexpr uint32_t vec_size = 16 / sizeof(__half);
  dim3 grid(num_tokens);
  uint32_t block = std::min(static_cast<uint32_t>(d) / vec_size, 1024U);
  activation::act_and_mul_kernel<__half, activation::gelu_tanh><<<grid, block, 0, stream>>>(out, input, d);
}
