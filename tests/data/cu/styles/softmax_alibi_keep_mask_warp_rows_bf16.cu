// Attention probabilities with ALiBi in TensorRT-LLM's unfused style, bf16 scores in and out: one warp per row of
// scores [batch, heads, q_len, k_len] (4 rows a block, the row flat over blockIdx.x and threadIdx.y), the keys strided
// by the lanes with the row kept in registers (k_len <= 32 * 32), x = scale * score + slope[h] * (k - q) + (1 - m) *
// -10000 with a bf16 0/1 keep-mask [batch, q_len, k_len] and bf16 slopes [heads]; warp-shuffle max and sum,
// exp by __expf, the sum + 1e-6 inverted by __fdividef, each probability rounded once to bf16.
#include <cuda_bf16.h>

/* kerntune:
args  = ["probs: out bf16[b * h * q * k]", "scores: in bf16[b * h * q * k]", "slopes: in bf16[h] ~ uniform(0.01, 0.5)",
         "keep: in bf16[b * q * k] ~ randint(0, 2)", "scale: f32 = 0.125", "num_heads: i32 = h",
         "q_len: i32 = q", "k_len: i32 = k", "total_rows: i32 = b * h * q"]
sizes = [{ b = 2, h = 16, q = 256, k = 256 }, { b = 8, h = 12, q = 1, k = 1000 }, { b = 3, h = 5, q = 33, k = 77 }]
grid  = "cdiv(b * h * q, 4)"
block = ["32", "4"]
*/
__global__ void alibi_softmax_warp(__nv_bfloat16* __restrict__ probs, const __nv_bfloat16* __restrict__ scores,
                                   const __nv_bfloat16* __restrict__ slopes, const __nv_bfloat16* __restrict__ keep,
                                   float scale, int num_heads, int q_len, int k_len, int total_rows) {
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= total_rows) return;
  const int q = row % q_len;
  const int head = (row / q_len) % num_heads;
  const int batch = row / (q_len * num_heads);
  const float slope = __bfloat162float(slopes[head]);
  const __nv_bfloat16* s = scores + (size_t)row * k_len;
  const __nv_bfloat16* m = keep + ((size_t)batch * q_len + q) * k_len;
  float vals[32];
  float mx = -1e20f;
#pragma unroll
  for (int it = 0; it < 32; ++it) {
    const int k = it * 32 + threadIdx.x;
    if (k < k_len) {
      float bias = slope * (float)(k - q);
      bias += (1.0f - __bfloat162float(m[k])) * -10000.0f;
      vals[it] = scale * __bfloat162float(s[k]) + bias;
      mx = fmaxf(mx, vals[it]);
    }
  }
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  float sum = 0.0f;
#pragma unroll
  for (int it = 0; it < 32; ++it) {
    const int k = it * 32 + threadIdx.x;
    if (k < k_len) {
      vals[it] = __expf(vals[it] - mx);
      sum += vals[it];
    }
  }
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  const float inv = __fdividef(1.0f, sum + 1e-6f);
#pragma unroll
  for (int it = 0; it < 32; ++it) {
    const int k = it * 32 + threadIdx.x;
    if (k < k_len) probs[(size_t)row * k_len + k] = __float2bfloat16(vals[it] * inv);
  }
}

void alibi_softmax(__nv_bfloat16* probs, const __nv_bfloat16* scores, const __nv_bfloat16* slopes,
                   const __nv_bfloat16* keep, float scale, int batch, int heads, int q_len, int k_len,
                   cudaStream_t stream) {
  const int rows = batch * heads * q_len;
  alibi_softmax_warp<<<(rows + 3) / 4, dim3(32, 4), 0, stream>>>(probs, scores, slopes, keep, scale, heads, q_len,
                                                                 k_len, rows);
}
