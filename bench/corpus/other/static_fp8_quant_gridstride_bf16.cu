// Static per-tensor FP8 quantization (bf16 -> fp8 e4m3), as vLLM's scaled_fp8_quant does it for activations with a
// precomputed scale: out = fp8(clamp(x / *scale, -448, 448)), the scale read from device memory (a one-element
// tensor, so no host sync). One block of 1024 threads per token, but the body is a size_t grid-stride loop over
// all num_elems elements with the block size aliased to a local (nthreads) and an index local.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cstdint>

#define FP8_E4M3_MAX 448.0f

__device__ __forceinline__ __nv_fp8_e4m3 scaled_fp8_conversion(float v, float inv_scale) {
  const float r = fmaxf(-FP8_E4M3_MAX, fminf(v * inv_scale, FP8_E4M3_MAX));
  return __nv_fp8_e4m3(r);
}

/* kerntune:
args  = ["out: out u8[tokens * hidden]", "input: in bf16[tokens * hidden]", "scale: in f32[1] ~ uniform(0.005, 0.02)",
         "num_elems: i64 = tokens * hidden"]
sizes = [{ tokens = 8192, hidden = 8192 }, { tokens = 16, hidden = 7168 }, { tokens = 1001, hidden = 4097 }]
grid  = "tokens"
block = "1024"
*/
__global__ void static_scaled_fp8_quant_kernel(__nv_fp8_e4m3* __restrict__ out,
                                               const __nv_bfloat16* __restrict__ input,
                                               const float* __restrict__ scale, int64_t num_elems) {
  const int nthreads = blockDim.x;
  const float inv_scale = 1.0f / *scale;
  const size_t stride = (size_t)nthreads * gridDim.x;
  for (size_t idx = (size_t)blockIdx.x * nthreads + threadIdx.x; idx < (size_t)num_elems; idx += stride) {
    out[idx] = scaled_fp8_conversion(__bfloat162float(input[idx]), inv_scale);
  }
}

void static_scaled_fp8_quant(__nv_fp8_e4m3* out, const __nv_bfloat16* input, const float* scale, int64_t num_tokens,
                             int64_t hidden_size, cudaStream_t stream) {
  const int64_t num_elems = num_tokens * hidden_size;
  dim3 grid(num_tokens);
  dim3 block(1024);
  static_scaled_fp8_quant_kernel<<<grid, block, 0, stream>>>(out, input, scale, num_elems);
}
