// Split-K reduce of UNNORMALIZED partial accumulators scaled per split, in another style than the held-out TurboMind
// reduce: bf16 partials into a bf16 output (TurboMind: fp32 into fp16), the metas two fp32 arrays max and sum (not
// (M, L) pairs), split-major [splits, tokens, heads] (TurboMind: [tokens, heads, splits]), an int64 count of splits
// per token whose null default is the allocation max_splits (TurboMind: int32, 1), the exponent's scale written before
// the difference, the inputs first and the output after them, the head size an argument; one warp per (token, head)
// row on a (head groups, tokens) grid of 4-warp blocks (TurboMind: a 4-warp block per row). The statistics as
// TurboMind takes them: the maxima raw scores, w_k = exp2(scale_log2 * (m_k - M)) (0 for an empty split), L = sum_k
// w_k l_k (split k in lane k, an xor butterfly), each split's scale w_k / L, out = sum_k v_k * scale_k.
#include <cuda_bf16.h>
#include <cstdint>
#include <cmath>

/* kerntune:
args  = ["part_out: in bf16[S * T * H * D]", "part_max: in f32[S * T * H] ~ uniform(-6, 12)",
         "part_sum: in f32[S * T * H] ~ uniform(1, 32)", "splits_per_token: in i64[T] ~ randint(1, S + 1)",
         "out: out bf16[T * H * D]", "scale_log2: f32 = 0.18033688", "max_splits: i32 = S",
         "num_tokens: i32 = T", "num_heads: i32 = H", "head_dim: i32 = D"]
sizes = [{ T = 64, S = 16, H = 32, D = 128 },
         { T = 7, S = 32, H = 5, D = 80 },
         { T = 301, S = 5, H = 3, D = 64 }]
grid  = ["cdiv(H, 4)", "T"]
block = [32, 4]
*/
__global__ void splitk_scaled_combine(const __nv_bfloat16* __restrict__ part_out, const float* __restrict__ part_max,
                                      const float* __restrict__ part_sum, const int64_t* __restrict__ splits_per_token,
                                      __nv_bfloat16* __restrict__ out, float scale_log2, int max_splits,
                                      int num_tokens, int num_heads, int head_dim) {
  __shared__ float s_scale[4][32];
  const int h = blockIdx.x * blockDim.y + threadIdx.y;
  const int t = blockIdx.y;
  const int lane = threadIdx.x;
  if (h >= num_heads) return;  // the warp's row (a whole warp leaves)
  int n = splits_per_token ? (int)splits_per_token[t] : max_splits;
  n = min(n, max_splits);  // at most 32 splits: one a lane
  const size_t split_stride = (size_t)num_tokens * num_heads;  // one split's metas
  const size_t row = (size_t)t * num_heads + h;

  // lane k: split k's max and its weight, the row's max and sum by xor shuffles
  const float mk = lane < n ? part_max[row + (size_t)lane * split_stride] : -INFINITY;
  float gmax = mk;
  for (int o = 16; o > 0; o >>= 1) gmax = fmaxf(gmax, __shfl_xor_sync(0xffffffffu, gmax, o));
  const float w = mk == -INFINITY ? 0.f : exp2f(scale_log2 * (mk - gmax));
  float lsum = lane < n ? w * part_sum[row + (size_t)lane * split_stride] : 0.f;
  for (int o = 16; o > 0; o >>= 1) lsum += __shfl_xor_sync(0xffffffffu, lsum, o);
  s_scale[threadIdx.y][lane] = mk == -INFINITY ? 0.f : w / lsum;
  __syncwarp();

  // each lane two channels at a time, the splits in order
  for (int c = lane * 2; c < head_dim; c += 64) {
    float acc0 = 0.f, acc1 = 0.f;
    for (int k = 0; k < n; ++k) {
      const float sk = s_scale[threadIdx.y][k];
      const __nv_bfloat162 v =
          *reinterpret_cast<const __nv_bfloat162*>(part_out + ((size_t)k * split_stride + row) * head_dim + c);
      acc0 += __low2float(v) * sk;
      acc1 += __high2float(v) * sk;
    }
    *reinterpret_cast<__nv_bfloat162*>(out + row * head_dim + c) = __floats2bfloat162_rn(acc0, acc1);
  }
}
