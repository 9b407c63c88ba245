// Rotary embedding as a Hugging Face model calls it, apply_rotary_pos_emb(q, k, cos, sin), where the caller (the
// model's rotary module) has already gathered cos and sin for each token: no position ids reach the kernel, cos
// and sin are [num_tokens, head_dim / 2] bf16 tensors indexed by the token itself (each frequency once, not the
// duplicated cat(freqs, freqs) halves). NeoX pairing (rotate_half: element i with element i + head_dim / 2),
// q [num_tokens, num_heads, head_dim] and k [num_tokens, num_kv_heads, head_dim] rotated out of place into q_out
// and k_out, math in fp32 and one rounding to bf16 per output. One token per block of (head_dim / 2,
// kHeadsPerBlock) threads: threadIdx.x is the pair, threadIdx.y strides over the query heads and then the key
// heads; the token's cos and sin are read once per thread and reused for every head.
#include <cuda_runtime.h>
#include <cuda_bf16.h>

constexpr int kHeadsPerBlock = 4;

/* kerntune:
args  = ["q: in bf16[num_tokens * num_heads * head_dim]", "k: in bf16[num_tokens * num_kv_heads * head_dim]",
         "cos: in bf16[num_tokens * head_dim / 2] ~ uniform(-1, 1)",
         "sin: in bf16[num_tokens * head_dim / 2] ~ uniform(-1, 1)",
         "q_out: out bf16[num_tokens * num_heads * head_dim]", "k_out: out bf16[num_tokens * num_kv_heads * head_dim]",
         "num_heads: i32 = num_heads", "num_kv_heads: i32 = num_kv_heads", "head_dim: i32 = head_dim"]
sizes = [{ num_tokens = 8192, num_heads = 32, num_kv_heads = 8, head_dim = 128 },
         { num_tokens = 24, num_heads = 32, num_kv_heads = 8, head_dim = 128 },
         { num_tokens = 1001, num_heads = 25, num_kv_heads = 5, head_dim = 80 }]
grid  = "num_tokens"
block = ["head_dim / 2", 4]
*/
__global__ void apply_rotary_pos_emb_gathered_kernel(const __nv_bfloat16* __restrict__ q,
                                                     const __nv_bfloat16* __restrict__ k,
                                                     const __nv_bfloat16* __restrict__ cos,
                                                     const __nv_bfloat16* __restrict__ sin,
                                                     __nv_bfloat16* __restrict__ q_out,
                                                     __nv_bfloat16* __restrict__ k_out, int num_heads,
                                                     int num_kv_heads, int head_dim) {
  const int token = blockIdx.x;
  const int half_dim = head_dim / 2;
  const int i = threadIdx.x;  // the pair (i, i + half_dim); blockDim.x == half_dim
  if (i >= half_dim) return;

  const float c = __bfloat162float(cos[(size_t)token * half_dim + i]);
  const float s = __bfloat162float(sin[(size_t)token * half_dim + i]);

  const int total_heads = num_heads + num_kv_heads;
  for (int head = threadIdx.y; head < total_heads; head += blockDim.y) {
    const __nv_bfloat16* x;
    __nv_bfloat16* out;
    if (head < num_heads) {
      const size_t offset = ((size_t)token * num_heads + head) * head_dim;
      x = q + offset;
      out = q_out + offset;
    } else {
      const size_t offset = ((size_t)token * num_kv_heads + (head - num_heads)) * head_dim;
      x = k + offset;
      out = k_out + offset;
    }
    const float x1 = __bfloat162float(x[i]);
    const float x2 = __bfloat162float(x[i + half_dim]);
    // x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x2, x1)
    out[i] = __float2bfloat16(x1 * c - x2 * s);
    out[i + half_dim] = __float2bfloat16(x2 * c + x1 * s);
  }
}

// q, q_out: [num_tokens, num_heads, head_dim]; k, k_out: [num_tokens, num_kv_heads, head_dim];
// cos, sin: [num_tokens, head_dim / 2], already gathered at each token's position
void apply_rotary_pos_emb_bf16(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* cos,
                               const __nv_bfloat16* sin, __nv_bfloat16* q_out, __nv_bfloat16* k_out, int num_tokens,
                               int num_heads, int num_kv_heads, int head_dim, cudaStream_t stream) {
  const dim3 grid(num_tokens);
  const dim3 block(head_dim / 2, kHeadsPerBlock);
  apply_rotary_pos_emb_gathered_kernel<<<grid, block, 0, stream>>>(q, k, cos, sin, q_out, k_out, num_heads,
                                                                   num_kv_heads, head_dim);
}
