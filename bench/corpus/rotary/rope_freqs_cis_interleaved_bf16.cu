// Rotary embedding as Meta's Llama reference applies it (view_as_complex(x) * freqs_cis): GPT-J pairing of
// adjacent elements, a freqs_cis cache [max_position, head_dim / 2] of float2 (cos, sin) pairs, int32 positions,
// bf16 query and key rotated in place, fp32 arithmetic. One token per block of (head_dim / 2, 4) threads:
// threadIdx.x is the pair, threadIdx.y strides over the query heads followed by the key heads.
#include <cuda_runtime.h>
#include <cuda_bf16.h>

/* kerntune:
args  = ["xq: inout bf16[num_tokens * n_heads * head_dim]", "xk: inout bf16[num_tokens * n_kv_heads * head_dim]",
         "freqs_cis: in f32[4096 * head_dim] ~ uniform(-1, 1)", "positions: in i32[num_tokens] ~ randint(0, 4096)",
         "n_heads: i32 = n_heads", "n_kv_heads: i32 = n_kv_heads", "head_dim: i32 = head_dim"]
sizes = [{ num_tokens = 8192, n_heads = 32, n_kv_heads = 8, head_dim = 128 },
         { num_tokens = 64, n_heads = 32, n_kv_heads = 8, head_dim = 128 },
         { num_tokens = 1001, n_heads = 40, n_kv_heads = 40, head_dim = 128 }]
grid  = "num_tokens"
block = ["head_dim / 2", 4]
*/
__global__ void apply_rotary_emb_kernel(__nv_bfloat16* xq, __nv_bfloat16* xk, const float2* __restrict__ freqs_cis,
                                        const int* __restrict__ positions, int n_heads, int n_kv_heads,
                                        int head_dim) {
  const int t = blockIdx.x;
  const int p = threadIdx.x;  // pair index, < head_dim / 2
  const float2 f = freqs_cis[(size_t)positions[t] * (head_dim / 2) + p];
  for (int h = threadIdx.y; h < n_heads + n_kv_heads; h += blockDim.y) {
    __nv_bfloat16* x = h < n_heads ? xq + ((size_t)t * n_heads + h) * head_dim
                                   : xk + ((size_t)t * n_kv_heads + (h - n_heads)) * head_dim;
    const float a = __bfloat162float(x[2 * p]);
    const float b = __bfloat162float(x[2 * p + 1]);
    x[2 * p] = __float2bfloat16(a * f.x - b * f.y);
    x[2 * p + 1] = __float2bfloat16(a * f.y + b * f.x);
  }
}

void apply_rotary_emb(__nv_bfloat16* xq, __nv_bfloat16* xk, const float2* freqs_cis, const int* positions,
                      int num_tokens, int n_heads, int n_kv_heads, int head_dim, cudaStream_t stream) {
  dim3 grid(num_tokens);
  dim3 block(head_dim / 2, 4);
  apply_rotary_emb_kernel<<<grid, block, 0, stream>>>(xq, xk, freqs_cis, positions, n_heads, n_kv_heads, head_dim);
}
