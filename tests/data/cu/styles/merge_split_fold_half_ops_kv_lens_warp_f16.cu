// Split-KV decode combine that folds the splits in order with the arithmetic of the values in half, the convention
// of PaddleNLP's merge_multi_chunks written in another style: each split's UNNORMALIZED fp16 partial output
// (sum exp(s - m) v) with its fp32 max m and sum l, laid out [tokens, heads, max_splits(, head_dim)]; token t merges
// ceil(kv_lens[t] / kSplitSize) splits (a file constant, 256 keys a split) and is left as it is where kv_lens[t] <= 0.
// m' = fmaxf(m, m_s), s1 = __expf(m - m'), s2 = __expf(m_s - m'), l = l * s1 + l_s * s2 in fp32, and the half
// accumulator acc = __hadd(__hmul(acc, half(s1)), __hmul(v, half(s2))), from m = -INFINITY, l = 0; out = __hdiv(acc,
// half(l)). One warp a (token, head) row, four rows a block, a lane a channel at a time; no token-count argument
// (the grid's x), the head count after the head size.
#include <cuda_fp16.h>
#include <cmath>

constexpr int kSplitSize = 256;

/* kerntune:
args  = ["out: out f16[tokens * heads * head_dim]",
         "partial: in f16[tokens * heads * splits * head_dim] ~ uniform(-8, 8)",
         "split_max: in f32[tokens * heads * splits] ~ uniform(-4, 12)",
         "split_sum: in f32[tokens * heads * splits] ~ uniform(1, 8)",
         "kv_lens: in i32[tokens] ~ randint(1, splits * 256 + 1)",
         "head_dim: i32 = head_dim", "num_heads: i32 = heads", "max_splits: i32 = splits"]
sizes = [{ tokens = 64, heads = 16, splits = 8, head_dim = 128 },
         { tokens = 5, heads = 3, splits = 3, head_dim = 64 }]
grid  = ["tokens", "cdiv(heads, 4)"]
block = 128
*/
__global__ void fold_splits_half(__half* __restrict__ out, const __half* __restrict__ partial,
                                 const float* __restrict__ split_max, const float* __restrict__ split_sum,
                                 const int* __restrict__ kv_lens, int head_dim, int num_heads, int max_splits) {
  const int token = blockIdx.x;
  const int head = blockIdx.y * 4 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (head >= num_heads) return;
  const int kv_len = kv_lens[token];
  if (kv_len <= 0) return;
  const int nsplit = (kv_len + kSplitSize - 1) / kSplitSize;
  const size_t row = (size_t)token * num_heads + head;
  const float* ms = split_max + row * max_splits;
  const float* ls = split_sum + row * max_splits;
  const __half* src = partial + row * max_splits * head_dim;
  for (int c = lane; c < head_dim; c += 32) {
    __half acc = __float2half(0.f);
    float m_run = -INFINITY, l_run = 0.f;
    for (int s = 0; s < nsplit; s++) {
      const float m_s = ms[s];
      const float m_new = fmaxf(m_run, m_s);
      const float s1 = __expf(m_run - m_new);
      const float s2 = __expf(m_s - m_new);
      const __half s1h = __float2half(s1);
      const __half s2h = __float2half(s2);
      l_run = l_run * s1 + ls[s] * s2;
      acc = __hadd(__hmul(acc, s1h), __hmul(src[(size_t)s * head_dim + c], s2h));
      m_run = m_new;
    }
    out[row * head_dim + c] = __hdiv(acc, __float2half(l_run));
  }
}
