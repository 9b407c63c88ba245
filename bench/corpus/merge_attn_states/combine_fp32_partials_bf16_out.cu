// Flash-decoding style combine of two partial attention results (two KV splits of the same queries) where the
// split kernels keep their partial outputs in fp32 and the combine writes the final output in bf16: o_a, o_b fp32
// [tokens, heads, head_dim], their natural-log lse_a, lse_b fp32 [tokens, heads], out bf16 [tokens, heads,
// head_dim] and out_lse fp32 [tokens, heads]. The usual max-shifted merge in fp32: m = max(lse_a, lse_b),
// w = exp(lse - m), out = (o_a * w_a + o_b * w_b) / (w_a + w_b), out_lse = m + log(w_a + w_b), one rounding to
// bf16 at the store. One warp per (token, head) state over a flat index token * heads + head, 8 warps per block of
// 256 threads (warp = threadIdx.x / 32); a warp past the last state returns (there is no block barrier). When
// head_dim % 4 == 0 each lane reads float4 packs of both partials and writes two __nv_bfloat162; otherwise a
// scalar loop over the head dimension. Two empty splits (both lse -inf) give zeros and an out_lse of -inf, not NaN.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdint>
#include <cmath>

constexpr int kWarpSize = 32;
constexpr int kWarpsPerBlock = 8;
constexpr int kCombineThreads = kWarpSize * kWarpsPerBlock;

/* kerntune:
args  = ["o_a: in f32[tokens * heads * head_dim]", "o_b: in f32[tokens * heads * head_dim]",
         "lse_a: in f32[tokens * heads] ~ uniform(-4, 12)", "lse_b: in f32[tokens * heads] ~ uniform(-4, 12)",
         "out: out bf16[tokens * heads * head_dim]", "out_lse: out f32[tokens * heads]", "tokens: i32 = tokens",
         "heads: i32 = heads", "head_dim: i32 = head_dim"]
sizes = [{ tokens = 4096, heads = 32, head_dim = 128 }, { tokens = 16, heads = 64, head_dim = 128 },
         { tokens = 1001, heads = 7, head_dim = 99 }]
grid  = "cdiv(tokens * heads, 8)"
block = 256
*/
__global__ void combine_fp32_partials_bf16_kernel(const float* __restrict__ o_a, const float* __restrict__ o_b,
                                                  const float* __restrict__ lse_a, const float* __restrict__ lse_b,
                                                  __nv_bfloat16* __restrict__ out, float* __restrict__ out_lse,
                                                  int tokens, int heads, int head_dim) {
  const int lane = threadIdx.x % kWarpSize;
  const int state = blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarpSize;  // token * heads + head
  if (state >= tokens * heads) return;

  const float la = lse_a[state];
  const float lb = lse_b[state];
  const float m = fmaxf(la, lb);
  const bool empty = (m == -INFINITY);  // neither split saw a key
  const float wa = empty ? 0.f : expf(la - m);
  const float wb = empty ? 0.f : expf(lb - m);
  const float inv = empty ? 0.f : 1.f / (wa + wb);
  const float sa = wa * inv;
  const float sb = wb * inv;

  const int64_t base = (int64_t)state * head_dim;
  if (head_dim % 4 == 0) {
    // base is a multiple of 4 floats: 16-byte aligned fp32 packs, 8-byte aligned groups of 4 bf16
    const float4* pa = reinterpret_cast<const float4*>(o_a + base);
    const float4* pb = reinterpret_cast<const float4*>(o_b + base);
    __nv_bfloat162* po = reinterpret_cast<__nv_bfloat162*>(out + base);
    const int packs = head_dim / 4;
    for (int i = lane; i < packs; i += kWarpSize) {
      const float4 a = pa[i];
      const float4 b = pb[i];
      po[2 * i] = __floats2bfloat162_rn(a.x * sa + b.x * sb, a.y * sa + b.y * sb);
      po[2 * i + 1] = __floats2bfloat162_rn(a.z * sa + b.z * sb, a.w * sa + b.w * sb);
    }
  } else {
    for (int d = lane; d < head_dim; d += kWarpSize) {
      out[base + d] = __float2bfloat16(o_a[base + d] * sa + o_b[base + d] * sb);
    }
  }
  if (lane == 0) out_lse[state] = empty ? -INFINITY : m + logf(wa + wb);
}

// o_a, o_b: [tokens, heads, head_dim] fp32 partials; lse_a, lse_b, out_lse: [tokens, heads], natural log;
// out: [tokens, heads, head_dim] bf16.
void combine_fp32_partials_bf16(const float* o_a, const float* o_b, const float* lse_a, const float* lse_b,
                                __nv_bfloat16* out, float* out_lse, int tokens, int heads, int head_dim,
                                cudaStream_t stream) {
  const int states = tokens * heads;
  if (states == 0 || head_dim == 0) return;
  const dim3 block(kCombineThreads);
  const dim3 grid((states + kWarpsPerBlock - 1) / kWarpsPerBlock);
  combine_fp32_partials_bf16_kernel<<<grid, block, 0, stream>>>(o_a, o_b, lse_a, lse_b, out, out_lse, tokens,
                                                                heads, head_dim);
}
