// split-KV decode combine (the second pass of a flash-decoding kernel): each of num_splits KV chunks left a partial
// output and its natural-log lse, split-major as FlashAttention's out_accum / softmax_lse_accum: partial
// [num_splits, num_tokens, num_heads, head_dim] bf16, partial_lse [num_splits, num_tokens, num_heads] fp32, merged
// into out [num_tokens, num_heads, head_dim] bf16, no merged lse. The counts first in the argument list, one block
// per token whose threads stride over the token's num_heads * head_dim elements one at a time, each keeping a
// running max, sum and accumulator over the splits (expf), a split whose lse is -inf skipped; one rounding at the
// store, the sum's reciprocal taken once
#include <cuda_bf16.h>
#include <math.h>
/* kerntune:
args  = ["num_splits: i32 = s", "num_tokens: i32 = t", "num_heads: i32 = h", "head_dim: i32 = d",
         "partial: in bf16[s * t * h * d]", "partial_lse: in f32[s * t * h] ~ uniform(-8, 8)",
         "out: out bf16[t * h * d]"]
sizes = [{ s = 8, t = 96, h = 32, d = 128 }, { s = 3, t = 19, h = 5, d = 80 }, { s = 16, t = 4, h = 40, d = 64 }]
grid  = ["t"]
block = "256"
*/
__global__ void combine_split_kv(int num_splits, int num_tokens, int num_heads, int head_dim,
                                 const __nv_bfloat16* __restrict__ partial, const float* __restrict__ partial_lse,
                                 __nv_bfloat16* __restrict__ out) {
  const int t = blockIdx.x;
  const int n = num_heads * head_dim;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int h = i / head_dim;
    float run_max = -INFINITY, run_sum = 0.f, acc = 0.f;
    for (int sp = 0; sp < num_splits; ++sp) {
      const size_t r = ((size_t)sp * num_tokens + t) * num_heads + h;
      const float l = partial_lse[r];
      if (l == -INFINITY) continue;
      const float mx = fmaxf(run_max, l);
      const float f_old = expf(run_max - mx), f_new = expf(l - mx);
      run_sum = run_sum * f_old + f_new;
      acc = acc * f_old + __bfloat162float(partial[r * head_dim + (i - h * head_dim)]) * f_new;
      run_max = mx;
    }
    const float inv = run_sum > 0.f ? 1.f / run_sum : 0.f;
    out[(size_t)t * n + i] = __float2bfloat16(acc * inv);
  }
}

void combine_splits(const __nv_bfloat16* partial, const float* partial_lse, __nv_bfloat16* out, int num_splits,
                    int num_tokens, int num_heads, int head_dim, cudaStream_t stream) {
  if (num_tokens == 0) return;
  combine_split_kv<<<num_tokens, 256, 0, stream>>>(num_splits, num_tokens, num_heads, head_dim, partial, partial_lse,
                                                   out);
}
