// Rotary embedding as Hugging Face's apply_rotary_pos_emb writes it (q * cos + rotate_half(q) * sin), ported to
// CUDA in fp32: cos and sin caches [max_position, head_dim] holding each frequency twice (emb = cat(freqs,
// freqs)), int64 position ids, out of place into q_embed and k_embed; a block per (token, head) over a 2-D grid
// (query heads, then key heads), one thread per element of the head.
#include <cuda_runtime.h>
#include <cstdint>

/* kerntune:
args  = ["q: in f32[num_tokens * num_heads * head_dim]", "k: in f32[num_tokens * num_kv_heads * head_dim]",
         "cos: in f32[4096 * head_dim] ~ uniform(-1, 1)", "sin: in f32[4096 * head_dim] ~ uniform(-1, 1)",
         "position_ids: in i64[num_tokens] ~ randint(0, 4096)",
         "q_embed: out f32[num_tokens * num_heads * head_dim]", "k_embed: out f32[num_tokens * num_kv_heads * head_dim]",
         "num_heads: i32 = num_heads", "num_kv_heads: i32 = num_kv_heads", "head_dim: i32 = head_dim"]
sizes = [{ num_tokens = 4096, num_heads = 32, num_kv_heads = 8, head_dim = 128 },
         { num_tokens = 16, num_heads = 32, num_kv_heads = 32, head_dim = 128 },
         { num_tokens = 1001, num_heads = 32, num_kv_heads = 32, head_dim = 96 }]
grid  = ["num_tokens", "num_heads + num_kv_heads"]
block = "head_dim"
*/
__global__ void apply_rotary_pos_emb_kernel(const float* __restrict__ q, const float* __restrict__ k,
                                            const float* __restrict__ cos, const float* __restrict__ sin,
                                            const int64_t* __restrict__ position_ids, float* __restrict__ q_embed,
                                            float* __restrict__ k_embed, int num_heads, int num_kv_heads,
                                            int head_dim) {
  const int t = blockIdx.x;
  const int h = blockIdx.y;
  const int d = threadIdx.x;
  if (d >= head_dim) return;
  const float* src;
  float* dst;
  if (h < num_heads) {
    const size_t off = ((size_t)t * num_heads + h) * head_dim;
    src = q + off;
    dst = q_embed + off;
  } else {
    const size_t off = ((size_t)t * num_kv_heads + (h - num_heads)) * head_dim;
    src = k + off;
    dst = k_embed + off;
  }
  const int64_t pos = position_ids[t];
  const float c = cos[pos * head_dim + d];
  const float s = sin[pos * head_dim + d];
  const int half = head_dim / 2;
  const float rotated = d < half ? -src[d + half] : src[d - half];  // rotate_half
  dst[d] = src[d] * c + rotated * s;
}

void apply_rotary_pos_emb(const float* q, const float* k, const float* cos, const float* sin,
                          const int64_t* position_ids, float* q_embed, float* k_embed, int num_tokens, int num_heads,
                          int num_kv_heads, int head_dim, cudaStream_t stream) {
  const dim3 grid(num_tokens, num_heads + num_kv_heads);
  const dim3 block(head_dim);
  apply_rotary_pos_emb_kernel<<<grid, block, 0, stream>>>(q, k, cos, sin, position_ids, q_embed, k_embed, num_heads,
                                                          num_kv_heads, head_dim);
}
