// ALiBi attention probabilities as an eager BLOOM / MPT port writes them with the accurate exponential: fp32 scores
// [batch, heads, q_len, k_len] from the QK^T GEMM to fp16 probabilities, x = scale * score + (slope[h] * (k - q) +
// (1 - keep[b, q, k]) * -10000) with an fp32 0/1 keep-mask [batch, q_len, k_len] and fp32 slopes [heads]; three
// passes over the row (max, sum, write) re-reading the scores, exp by expf, the sum + 1e-6 inverted by __fdividef,
// each probability rounded once to fp16. One warp per query row, WARPS_PER_BLOCK rows a block on threadIdx.y, a 3-D
// grid (query blocks, heads, batch).
// Tolerance: probabilities are ~1/k_len and below, far under the f16 default atol of 1e-2, so atol is 1e-6.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define WARPS_PER_BLOCK 4

/* kerntune:
args  = ["scores: in f32[batch * heads * q_len * k_len]", "keep: in f32[batch * q_len * k_len] ~ randint(0, 2)",
         "slopes: in f32[heads] ~ uniform(0.004, 0.5)", "probs: out f16[batch * heads * q_len * k_len]",
         "batch: i32 = batch", "heads: i32 = heads", "q_len: i32 = q_len", "k_len: i32 = k_len",
         "scale: f32 = 0.088388"]
sizes = [{ batch = 2, heads = 16, q_len = 512, k_len = 512 }, { batch = 8, heads = 32, q_len = 1, k_len = 2048 },
         { batch = 3, heads = 7, q_len = 45, k_len = 333 }]
grid  = ["cdiv(q_len, 4)", "heads", "batch"]
block = ["32", "4"]
atol  = 1e-6
*/
__global__ void alibi_attention_probs(const float* __restrict__ scores, const float* __restrict__ keep,
                                      const float* __restrict__ slopes, __half* __restrict__ probs, int batch,
                                      int heads, int q_len, int k_len, float scale) {
  const int q = blockIdx.x * WARPS_PER_BLOCK + threadIdx.y;
  const int h = blockIdx.y;
  const int b = blockIdx.z;
  if (q >= q_len) return;
  const long long row = ((long long)(b * heads + h) * q_len + q) * k_len;
  const long long keep_row = ((long long)b * q_len + q) * k_len;
  const float slope = slopes[h];
  float mx = -1e20f;
  for (int k = threadIdx.x; k < k_len; k += 32) {
    float bias = slope * (float)(k - q);
    bias += (1.0f - keep[keep_row + k]) * -10000.0f;
    mx = fmaxf(mx, scale * scores[row + k] + bias);
  }
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  float sum = 0.0f;
  for (int k = threadIdx.x; k < k_len; k += 32) {
    float bias = slope * (float)(k - q);
    bias += (1.0f - keep[keep_row + k]) * -10000.0f;
    sum += expf(scale * scores[row + k] + bias - mx);
  }
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  const float inv = __fdividef(1.0f, sum + 1e-6f);
  for (int k = threadIdx.x; k < k_len; k += 32) {
    float bias = slope * (float)(k - q);
    bias += (1.0f - keep[keep_row + k]) * -10000.0f;
    probs[row + k] = __float2half(expf(scale * scores[row + k] + bias - mx) * inv);
  }
}

void launch_alibi_attention_probs(const float* scores, const float* keep, const float* slopes, __half* probs,
                                  int batch, int heads, int q_len, int k_len, float scale, cudaStream_t stream) {
  dim3 grid((q_len + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK, heads, batch);
  dim3 block(32, WARPS_PER_BLOCK);
  alibi_attention_probs<<<grid, block, 0, stream>>>(scores, keep, slopes, probs, batch, heads, q_len, k_len, scale);
}
