// Split-KV decode combine of UNNORMALIZED partial accumulators, in the style of FlashDecoding-type and multi-block
// decode kernels that keep each split's accumulator acc = sum_j exp(s_j - m) v_j unnormalized together with its
// running max m and row sum l, the metas as two separate fp32 arrays (not float2 pairs). The combine:
//   gmax  = max_s m_s
//   out   = sum_s exp(m_s - gmax) * acc_s / sum_s exp(m_s - gmax) * l_s
// bf16 partials and output, fp32 metas, no flush of small weights. Layout token-major with the splits between the
// token and the heads: acc [tokens, splits, heads, head_dim], m and l [tokens, splits, heads]; out [tokens, heads,
// head_dim]. A warp per (token, head) row on a 1-D grid (eight rows a block), each lane a strided share of the
// row's elements; the output first, then the metas, then the partials, the counts last.
#include <cuda_bf16.h>
#include <cstddef>
#include <cmath>

/* kerntune:
args  = ["out: out bf16[T * H * D]",
         "part_max: in f32[T * S * H] ~ uniform(-4, 8)", "part_sum: in f32[T * S * H] ~ uniform(1, 16)",
         "part_acc: in bf16[T * S * H * D]",
         "num_splits: i32 = S", "num_tokens: i32 = T", "num_heads: i32 = H", "head_dim: i32 = D"]
sizes = [{ T = 64, S = 8, H = 32, D = 128 },
         { T = 5, S = 3, H = 7, D = 80 },
         { T = 2, S = 40, H = 4, D = 64 }]
grid  = ["cdiv(T * H, 8)"]
block = 256
*/
__global__ void combine_unnormalized_splits(__nv_bfloat16* __restrict__ out, const float* __restrict__ part_max,
                                            const float* __restrict__ part_sum,
                                            const __nv_bfloat16* __restrict__ part_acc, int num_splits,
                                            int num_tokens, int num_heads, int head_dim) {
  const int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= num_tokens * num_heads) return;
  const int t = row / num_heads;
  const int h = row % num_heads;
  const size_t base = (size_t)t * num_splits * num_heads + h;  // split s of the row at base + s * num_heads

  float gmax = -INFINITY;
  for (int s = 0; s < num_splits; ++s) gmax = fmaxf(gmax, part_max[base + (size_t)s * num_heads]);

  float denom = 0.f;
  for (int s = 0; s < num_splits; ++s)
    denom += part_sum[base + (size_t)s * num_heads] * expf(part_max[base + (size_t)s * num_heads] - gmax);

  for (int d = lane; d < head_dim; d += 32) {
    float acc = 0.f;
    for (int s = 0; s < num_splits; ++s) {
      const float w = expf(part_max[base + (size_t)s * num_heads] - gmax);
      acc += w * __bfloat162float(part_acc[(base + (size_t)s * num_heads) * head_dim + d]);
    }
    out[(size_t)row * head_dim + d] = __float2bfloat16(acc / denom);
  }
}
