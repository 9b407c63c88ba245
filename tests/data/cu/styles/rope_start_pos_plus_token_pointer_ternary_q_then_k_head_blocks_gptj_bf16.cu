// RoPE of a prefill chunk whose positions are start_pos + the token (no positions tensor; the token count only in
// the launch grid): bf16 q [tokens, n_heads * head_dim] and k [tokens, n_kv_heads * head_dim] rotated in place,
// GPT-J pairs (2i, 2i + 1), cos and sin tables [max_pos, head_dim / 2] in fp32. A block a (head, token), a thread a
// pair; q and then k through one pointer chosen per pass, the key pass only for the heads k has (GQA).
#include <cuda_bf16.h>

/* kerntune:
args  = ["q: inout bf16[tokens * n_heads * head_dim]", "k: inout bf16[tokens * n_kv_heads * head_dim]",
         "cos_tab: in f32[(tokens + 16) * (head_dim / 2)] ~ uniform(-1, 1)",
         "sin_tab: in f32[(tokens + 16) * (head_dim / 2)] ~ uniform(-1, 1)",
         "start_pos: i32 = 16", "n_heads: i32 = n_heads", "n_kv_heads: i32 = n_kv_heads", "head_dim: i32 = head_dim"]
sizes = [{ tokens = 4096, n_heads = 32, n_kv_heads = 8, head_dim = 128 },
         { tokens = 3, n_heads = 14, n_kv_heads = 2, head_dim = 64 }]
grid  = ["n_heads", "tokens"]
block = "head_dim / 2"
*/
__global__ void rope_prefill(__nv_bfloat16* q, __nv_bfloat16* k, const float* cos_tab, const float* sin_tab,
                             int start_pos, int n_heads, int n_kv_heads, int head_dim) {
  const int h = blockIdx.x, t = blockIdx.y, i = threadIdx.x;
  const int half_dim = head_dim / 2;
  const float c = cos_tab[(start_pos + t) * half_dim + i];
  const float s = sin_tab[(start_pos + t) * half_dim + i];
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1 && h >= n_kv_heads) break;
    __nv_bfloat16* row = pass == 0 ? q + ((size_t)t * n_heads + h) * head_dim
                                   : k + ((size_t)t * n_kv_heads + h) * head_dim;
    const float x0 = __bfloat162float(row[2 * i]);
    const float x1 = __bfloat162float(row[2 * i + 1]);
    row[2 * i] = __float2bfloat16(x0 * c - x1 * s);
    row[2 * i + 1] = __float2bfloat16(x1 * c + x0 * s);
  }
}

void rope_prefill_launch(__nv_bfloat16* q, __nv_bfloat16* k, const float* cos_tab, const float* sin_tab, int start_pos,
                         int tokens, int n_heads, int n_kv_heads, int head_dim, cudaStream_t stream) {
  rope_prefill<<<dim3(n_heads, tokens), head_dim / 2, 0, stream>>>(q, k, cos_tab, sin_tab, start_pos, n_heads,
                                                                   n_kv_heads, head_dim);
}
