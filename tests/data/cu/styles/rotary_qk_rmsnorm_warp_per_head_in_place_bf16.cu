// Qwen3's q / k RMSNorm fused into a partial NeoX rotary, in the style of the fused qk-norm + rope kernels of
// serving engines (a warp per (token, head), shuffles, bf16), in place: query [tokens, q_heads, head_dim] and key
// [tokens, kv_heads, head_dim] each normalized per head by its own bf16 weight (one eps), then its first rotary_dim
// channels rotated by cos and sin gathered per token as [tokens, rotary_dim] rows, each half of a pair reading its own
// entry (Hugging Face's rotate_half tables); the channels past rotary_dim written normalized. The norm behind one int
// flag for both (on in this spec: the expert's norm path is what the check verifies); 8 warps a block.
#include <cuda_bf16.h>

/* kerntune:
args  = ["q: inout bf16[T * QH * D]", "k: inout bf16[T * KH * D]", "cos: in bf16[T * R] ~ uniform(-1, 1)",
         "sin: in bf16[T * R] ~ uniform(-1, 1)", "q_weight: in bf16[D]", "k_weight: in bf16[D]",
         "eps: f32 = 1e-6", "apply_qk_norm: i32 = 1", "num_tokens: i32 = T", "num_q_heads: i32 = QH",
         "num_kv_heads: i32 = KH", "head_dim: i32 = D", "rotary_dim: i32 = R"]
sizes = [{ T = 2048, QH = 32, KH = 8, D = 128, R = 64 }, { T = 7, QH = 16, KH = 2, D = 64, R = 64 },
         { T = 333, QH = 40, KH = 8, D = 96, R = 48 }]
grid  = "(T * (QH + KH) + 7) / 8"
block = 256
*/
__global__ void fused_qk_rmsnorm_rope_kernel(__nv_bfloat16* __restrict__ q, __nv_bfloat16* __restrict__ k,
                                             const __nv_bfloat16* __restrict__ cos,
                                             const __nv_bfloat16* __restrict__ sin,
                                             const __nv_bfloat16* __restrict__ q_weight,
                                             const __nv_bfloat16* __restrict__ k_weight, const float eps,
                                             const int apply_qk_norm, const int num_tokens, const int num_q_heads,
                                             const int num_kv_heads, const int head_dim, const int rotary_dim) {
  const int warp_id = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  const int heads = num_q_heads + num_kv_heads;
  if (warp_id >= num_tokens * heads) return;
  const int token = warp_id / heads;
  const int h = warp_id % heads;
  const bool is_k = h >= num_q_heads;
  __nv_bfloat16* x = is_k ? k : q;
  const __nv_bfloat16* w = is_k ? k_weight : q_weight;
  const int n_heads = is_k ? num_kv_heads : num_q_heads;
  const int head = is_k ? h - num_q_heads : h;
  const long base = ((long)token * n_heads + head) * head_dim;

  float sum_sq = 0.f;
  if (apply_qk_norm) {
    for (int d = lane; d < head_dim; d += 32) {
      const float v = __bfloat162float(x[base + d]);
      sum_sq += v * v;
    }
    for (int offset = 16; offset > 0; offset >>= 1) sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, offset);
  }
  const float inv_rms = rsqrtf(sum_sq / (float)head_dim + eps);

  const int half = rotary_dim / 2;
  const long row = (long)token * rotary_dim;
  for (int i = lane; i < half; i += 32) {
    float x1 = __bfloat162float(x[base + i]);
    float x2 = __bfloat162float(x[base + i + half]);
    if (apply_qk_norm) {
      x1 *= inv_rms * __bfloat162float(w[i]);
      x2 *= inv_rms * __bfloat162float(w[i + half]);
    }
    const float c1 = __bfloat162float(cos[row + i]), c2 = __bfloat162float(cos[row + i + half]);
    const float s1 = __bfloat162float(sin[row + i]), s2 = __bfloat162float(sin[row + i + half]);
    x[base + i] = __float2bfloat16(x1 * c1 - x2 * s1);
    x[base + i + half] = __float2bfloat16(x2 * c2 + x1 * s2);
  }
  if (apply_qk_norm) {
    for (int d = rotary_dim + lane; d < head_dim; d += 32) {
      float v = __bfloat162float(x[base + d]);
      v *= inv_rms * __bfloat162float(w[d]);
      x[base + d] = __float2bfloat16(v);
    }
  }
}

void fused_qk_rmsnorm_rope(__nv_bfloat16* q, __nv_bfloat16* k, const __nv_bfloat16* cos, const __nv_bfloat16* sin,
                           const __nv_bfloat16* q_weight, const __nv_bfloat16* k_weight, float eps, bool apply_qk_norm,
                           int num_tokens, int num_q_heads, int num_kv_heads, int head_dim, int rotary_dim,
                           cudaStream_t stream) {
  const int warps = num_tokens * (num_q_heads + num_kv_heads);
  fused_qk_rmsnorm_rope_kernel<<<(warps + 7) / 8, 256, 0, stream>>>(q, k, cos, sin, q_weight, k_weight, eps,
                                                                    apply_qk_norm ? 1 : 0, num_tokens, num_q_heads,
                                                                    num_kv_heads, head_dim, rotary_dim);
}
