// Hugging Face eager attention probabilities for an fp16 model, one warp per score row (4 rows a block, a flat row
// index): scores [batch, heads, q_len, k_len] fp16, `attn_weights * scale` rounded to fp16 (a half tensor times a
// float), then an fp32 4-D mask [batch, 1, q_len, k_len] added in fp32 (its head dimension broadcast), softmax in
// fp32, fp16 probabilities out. Two passes over the row (max, then sum and write), the mask read each time.
#include <cuda_fp16.h>
/* kerntune:
args  = ["probs: out f16[batch * heads * q_len * k_len]", "scores: in f16[batch * heads * q_len * k_len]",
         "mask: in f32[batch * q_len * k_len] ~ uniform(-8, 0)", "batch: i32 = batch", "q_len: i32 = q_len",
         "heads: i32 = heads", "k_len: i32 = k_len", "scale: f32 = 0.125"]
sizes = [{ batch = 2, heads = 8, q_len = 64, k_len = 256 }, { batch = 4, heads = 16, q_len = 1, k_len = 1000 },
         { batch = 3, heads = 5, q_len = 33, k_len = 77 }]
grid  = "cdiv(batch * heads * q_len, 4)"
block = "128"
atol  = 1e-5
*/
__global__ void eager_probs_f16(__half* __restrict__ probs, const __half* __restrict__ scores,
                                const float* __restrict__ mask, int batch, int q_len, int heads, int k_len,
                                float scale) {
  const int row = blockIdx.x * 4 + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= batch * heads * q_len) return;
  const long long mrow = (long long)(row / (heads * q_len)) * q_len + row % q_len;  // [b, 0, q, :]
  const __half* s = scores + (long long)row * k_len;
  const float* m = mask + mrow * k_len;
  float mx = -INFINITY;
  for (int k = lane; k < k_len; k += 32) {
    const float w = __half2float(__float2half_rn(__half2float(s[k]) * scale));
    mx = fmaxf(mx, w + m[k]);
  }
  for (int o = 16; o; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  float sum = 0.f;
  for (int k = lane; k < k_len; k += 32) {
    const float w = __half2float(__float2half_rn(__half2float(s[k]) * scale));
    sum += expf(w + m[k] - mx);
  }
  for (int o = 16; o; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  for (int k = lane; k < k_len; k += 32) {
    const float w = __half2float(__float2half_rn(__half2float(s[k]) * scale));
    probs[(long long)row * k_len + k] = __float2half_rn(expf(w + m[k] - mx) / sum);
  }
}
