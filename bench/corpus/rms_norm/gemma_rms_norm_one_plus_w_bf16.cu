// Gemma RMSNorm (bf16), in the order of Hugging Face's GemmaRMSNorm and vLLM's GemmaRMSNorm.forward_native:
// the weight is stored as its offset from 1, so out = bf16(x * rsqrt(mean(x^2) + eps) * (1 + w)), everything in
// fp32 until the one rounding at the store. Packed __nv_bfloat162 loads and stores (Gemma's hidden sizes are
// even), one row per block of 256 threads, the sum of squares reduced by a shared-memory tree (no shuffles),
// a 64-bit token index, the block size a constant of the host side.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdint>

namespace gemma {

constexpr int kBlock = 256;

/* kerntune:
args  = ["out: out bf16[num_tokens * hidden_size]", "input: in bf16[num_tokens * hidden_size]",
         "weight: in bf16[hidden_size]", "epsilon: f32 = 1e-6", "hidden_size: i32 = hidden_size"]
sizes = [{ num_tokens = 8192, hidden_size = 3584 }, { num_tokens = 7, hidden_size = 2304 },
         { num_tokens = 1001, hidden_size = 4608 }]
grid  = "num_tokens"
block = 256
*/
__global__ void gemma_rms_norm_kernel(__nv_bfloat16* __restrict__ out, const __nv_bfloat16* __restrict__ input,
                                      const __nv_bfloat16* __restrict__ weight, const float epsilon,
                                      const int hidden_size) {
  __shared__ float partial[kBlock];
  const int64_t token = blockIdx.x;
  const int pairs = hidden_size / 2;
  const __nv_bfloat162* in2 = reinterpret_cast<const __nv_bfloat162*>(input + token * hidden_size);
  const __nv_bfloat162* w2 = reinterpret_cast<const __nv_bfloat162*>(weight);
  __nv_bfloat162* out2 = reinterpret_cast<__nv_bfloat162*>(out + token * hidden_size);

  float sum_sq = 0.0f;
  for (int p = threadIdx.x; p < pairs; p += kBlock) {
    const float2 v = __bfloat1622float2(in2[p]);
    sum_sq += v.x * v.x + v.y * v.y;
  }
  partial[threadIdx.x] = sum_sq;
  __syncthreads();
  for (int s = kBlock / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  const float inv_rms = rsqrtf(partial[0] / static_cast<float>(hidden_size) + epsilon);

  for (int p = threadIdx.x; p < pairs; p += kBlock) {
    const float2 v = __bfloat1622float2(in2[p]);
    const float2 w = __bfloat1622float2(w2[p]);
    out2[p] = __floats2bfloat162_rn(v.x * inv_rms * (1.0f + w.x), v.y * inv_rms * (1.0f + w.y));
  }
}

}  // namespace gemma

void gemma_rms_norm(__nv_bfloat16* out, const __nv_bfloat16* input, const __nv_bfloat16* weight, float epsilon,
                    int64_t num_tokens, int hidden_size, cudaStream_t stream) {
  gemma::gemma_rms_norm_kernel<<<dim3(static_cast<unsigned>(num_tokens)), dim3(gemma::kBlock), 0, stream>>>(
      out, input, weight, epsilon, hidden_size);
}
