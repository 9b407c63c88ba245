// RoPE over head-major q [batch, n_q, seq, dim] and k [batch, n_kv, seq, dim] (fp16, in place, GQA head counts), the
// way ports of Hugging Face's apply_rotary_pos_emb write it for q and k after their transpose: a block per (position,
// batch entry) (grid (seq, batch)), its threads over every head's pairs, each token's position from position_ids
// [batch, seq] (int64), cos and sin caches [max_pos, dim / 2] of fp32, NeoX halves.
#include <cuda_fp16.h>
#include <stdint.h>

/* kerntune:
args  = ["q: inout f16[B * NQ * S * D]", "k: inout f16[B * NKV * S * D]", "position_ids: in i64[B * S] ~ randint(0, 4096)",
         "cos_cache: in f32[4096 * D / 2] ~ uniform(-1, 1)", "sin_cache: in f32[4096 * D / 2] ~ uniform(-1, 1)",
         "seq: i32 = S", "n_q: i32 = NQ", "n_kv: i32 = NKV", "dim: i32 = D"]
sizes = [{ B = 2, S = 2048, NQ = 32, NKV = 8, D = 128 }, { B = 3, S = 5, NQ = 8, NKV = 2, D = 64 }]
grid  = ["S", "B"]
block = 256
*/
__global__ void rope_bhsd_pos_ids(__half* q, __half* k, const int64_t* __restrict__ position_ids,
                                  const float* __restrict__ cos_cache, const float* __restrict__ sin_cache, int seq,
                                  int n_q, int n_kv, int dim) {
  const int s = blockIdx.x, b = blockIdx.y;
  const int half = dim / 2;
  const int64_t pos = position_ids[(int64_t)b * seq + s];
  for (int p = threadIdx.x; p < (n_q + n_kv) * half; p += blockDim.x) {
    const int h = p / half, i = p % half;
    __half* x = h < n_q ? q + (((int64_t)b * n_q + h) * seq + s) * dim
                        : k + (((int64_t)b * n_kv + (h - n_q)) * seq + s) * dim;
    const float c = cos_cache[pos * half + i], sn = sin_cache[pos * half + i];
    const float x1 = __half2float(x[i]), x2 = __half2float(x[i + half]);
    x[i] = __float2half(x1 * c - x2 * sn);
    x[i + half] = __float2half(x2 * c + x1 * sn);
  }
}
