// NeoX rotary (bf16) over the query heads of a fused qkv projection, in place: a token's row holds the q, k and v
// heads (`row_stride` elements, more than the `n_heads` query heads rotated here), the k and v heads left as they
// are; each thread moves two adjacent pairs at once through an `__nv_bfloat162` view of the row (its index counts
// pairs of elements); cos and sin fp32 [tokens, head_dim / 2] gathered per token by the caller; fp32 math, one
// rounding at the store; a block a token, a loop over its (head, pair of pairs) items.
#include <cuda_runtime.h>
#include <cuda_bf16.h>

/* kerntune:
args  = ["qkv: inout bf16[tokens * row]", "cos_t: in f32[tokens * head_dim / 2] ~ uniform(-1, 1)",
         "sin_t: in f32[tokens * head_dim / 2] ~ uniform(-1, 1)", "row_stride: i32 = row", "n_heads: i32 = heads",
         "head_dim: i32 = head_dim"]
sizes = [{ tokens = 8192, heads = 32, head_dim = 128, row = 6144 },
         { tokens = 5, heads = 16, head_dim = 64, row = 2048 },
         { tokens = 333, heads = 5, head_dim = 96, row = 1056 }]
grid  = "tokens"
block = 128
*/
__global__ void rope_q_slice(__nv_bfloat16* __restrict__ qkv, const float* __restrict__ cos_t,
                             const float* __restrict__ sin_t, int row_stride, int n_heads, int head_dim) {
  const int t = blockIdx.x;
  const int quarter = head_dim / 4;  // pairs of elements in half a head
  __nv_bfloat162* row = reinterpret_cast<__nv_bfloat162*>(qkv + (long long)t * row_stride);
  const float* c = cos_t + (long long)t * (head_dim / 2);
  const float* s = sin_t + (long long)t * (head_dim / 2);
  for (int i = threadIdx.x; i < n_heads * quarter; i += blockDim.x) {
    const int h = i / quarter, j = i % quarter;
    const float2 a = __bfloat1622float2(row[h * (head_dim / 2) + j]);
    const float2 b = __bfloat1622float2(row[h * (head_dim / 2) + j + quarter]);
    const float c0 = c[2 * j], c1 = c[2 * j + 1], s0 = s[2 * j], s1 = s[2 * j + 1];
    row[h * (head_dim / 2) + j] = __floats2bfloat162_rn(a.x * c0 - b.x * s0, a.y * c1 - b.y * s1);
    row[h * (head_dim / 2) + j + quarter] = __floats2bfloat162_rn(b.x * c0 + a.x * s0, b.y * c1 + a.y * s1);
  }
}

void rope_q(__nv_bfloat16* qkv, const float* cos_t, const float* sin_t, int tokens, int n_heads, int n_kv_heads,
            int head_dim, cudaStream_t stream) {
  const int row_stride = (n_heads + 2 * n_kv_heads) * head_dim;
  rope_q_slice<<<tokens, 128, 0, stream>>>(qkv, cos_t, sin_t, row_stride, n_heads, head_dim);
}
