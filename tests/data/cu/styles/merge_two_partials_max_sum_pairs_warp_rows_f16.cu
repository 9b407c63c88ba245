// Merge of two attention partials whose softmax states are (running max, sum of exponentials) pairs, one float2-like
// pair a row stored as two floats (stats[2 * row] the max, stats[2 * row + 1] the sum), fp16 values [tokens, heads,
// head_size] each normalized by its own sum; no merged state written. A warp per (token, head) row, 4 rows a block,
// lanes striding over the head; the weights l * exp(m - max) over their sum, in fp32, rounded once at the store.
#include <cuda_fp16.h>

/* kerntune:
args  = ["out: out f16[T * H * D]", "a: in f16[T * H * D]", "a_stats: in f32[T * H * 2] ~ uniform(1, 12)",
         "b: in f16[T * H * D]", "b_stats: in f32[T * H * 2] ~ uniform(1, 12)", "num_tokens: i32 = T",
         "num_heads: i32 = H", "head_dim: i32 = D"]
sizes = [{ T = 2048, H = 32, D = 128 }, { T = 5, H = 12, D = 64 }]
grid  = "cdiv(T * H, 4)"
block = [32, 4]
*/
__global__ void merge_partials_ml_pairs(__half* out, const __half* a, const float* a_stats, const __half* b,
                                        const float* b_stats, int num_tokens, int num_heads, int head_dim) {
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  if (row >= num_tokens * num_heads) return;
  const float ma = a_stats[2 * row], la = a_stats[2 * row + 1];
  const float mb = b_stats[2 * row], lb = b_stats[2 * row + 1];
  const float m = fmaxf(ma, mb);
  const float wa = la * expf(ma - m), wb = lb * expf(mb - m);
  const float inv = 1.f / (wa + wb);
  for (int d = threadIdx.x; d < head_dim; d += 32) {
    const long long i = (long long)row * head_dim + d;
    out[i] = __float2half(__half2float(a[i]) * (wa * inv) + __half2float(b[i]) * (wb * inv));
  }
}
