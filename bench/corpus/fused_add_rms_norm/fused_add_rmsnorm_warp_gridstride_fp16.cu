// Fused residual add + RMSNorm (fp16, both tensors updated in place, vLLM's fused_add_rms_norm contract):
// residual = input + residual (added with __hadd, so rounded to fp16 as stored), then
// input = fp16(residual * inv_rms * weight). One warp per token (block (32, 4): threadIdx.y picks the warp's
// token) inside a persistent grid-stride loop over groups of 4 tokens, with grid = min(ceil(tokens / 4), 1024);
// the sum of squares is reduced by __shfl_xor_sync only (no shared memory, no block barrier, so a warp with no
// token left simply leaves the loop); the second pass re-reads the rounded residual that the same lane wrote.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <algorithm>
#include <cstdint>

#define WARP_SIZE 32
#define TOKENS_PER_BLOCK 4
#define MAX_BLOCKS 1024

/* kerntune:
args  = ["input: inout f16[num_tokens * hidden_size]", "residual: inout f16[num_tokens * hidden_size]",
         "weight: in f16[hidden_size]", "epsilon: f32 = 1e-6", "num_tokens: i32 = num_tokens",
         "hidden_size: i32 = hidden_size"]
sizes = [{ num_tokens = 8192, hidden_size = 4096 }, { num_tokens = 8, hidden_size = 8192 },
         { num_tokens = 1003, hidden_size = 5121 }]
grid  = "min(cdiv(num_tokens, 4), 1024)"
block = [32, 4]
*/
__global__ void fused_add_rms_norm_warp_kernel(__half* __restrict__ input, __half* __restrict__ residual,
                                               const __half* __restrict__ weight, const float epsilon,
                                               const int num_tokens, const int hidden_size) {
  const int lane = threadIdx.x;
  for (int token = blockIdx.x * TOKENS_PER_BLOCK + threadIdx.y; token < num_tokens;
       token += gridDim.x * TOKENS_PER_BLOCK) {
    __half* x = input + (int64_t)token * hidden_size;
    __half* r = residual + (int64_t)token * hidden_size;

    float variance = 0.f;
    for (int i = lane; i < hidden_size; i += WARP_SIZE) {
      const __half z = __hadd(x[i], r[i]);
      r[i] = z;
      const float zf = __half2float(z);
      variance += zf * zf;
    }
#pragma unroll
    for (int mask = WARP_SIZE / 2; mask > 0; mask >>= 1) variance += __shfl_xor_sync(0xffffffffu, variance, mask);
    const float inv_rms = rsqrtf(variance / (float)hidden_size + epsilon);

    for (int i = lane; i < hidden_size; i += WARP_SIZE) {
      x[i] = __float2half(__half2float(r[i]) * inv_rms * __half2float(weight[i]));
    }
  }
}

void fused_add_rms_norm_fp16(__half* input, __half* residual, const __half* weight, float epsilon, int num_tokens,
                             int hidden_size, cudaStream_t stream) {
  const dim3 block(WARP_SIZE, TOKENS_PER_BLOCK);
  const int groups = (num_tokens + TOKENS_PER_BLOCK - 1) / TOKENS_PER_BLOCK;
  const dim3 grid(std::min(groups, MAX_BLOCKS));
  fused_add_rms_norm_warp_kernel<<<grid, block, 0, stream>>>(input, residual, weight, epsilon, num_tokens,
                                                             hidden_size);
}
