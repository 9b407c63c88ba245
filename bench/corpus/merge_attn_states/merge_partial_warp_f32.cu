// Merge of two partial attention results in fp32 (split-KV / flash-decoding style: partial outputs and their
// natural-log lse laid out [num_tokens, num_heads]), one warp per (token, head) and 4 of them per block
// (block (32, 4)), each lane striding the head dimension. Output values and output lse both written.
#include <cuda_runtime.h>

/* kerntune:
args  = ["o_a: in f32[num_tokens * num_heads * head_dim]", "lse_a: in f32[num_tokens * num_heads] ~ uniform(-4, 12)",
         "o_b: in f32[num_tokens * num_heads * head_dim]", "lse_b: in f32[num_tokens * num_heads] ~ uniform(-4, 12)",
         "o: out f32[num_tokens * num_heads * head_dim]", "lse: out f32[num_tokens * num_heads]",
         "num_tokens: i32 = num_tokens", "num_heads: i32 = num_heads", "head_dim: i32 = head_dim"]
sizes = [{ num_tokens = 8192, num_heads = 32, head_dim = 128 }, { num_tokens = 16, num_heads = 32, head_dim = 128 },
         { num_tokens = 1001, num_heads = 28, head_dim = 96 }]
grid  = "cdiv(num_tokens * num_heads, 4)"
block = [32, 4]
*/
__global__ void merge_partial_attn_f32(const float* __restrict__ o_a, const float* __restrict__ lse_a,
                                       const float* __restrict__ o_b, const float* __restrict__ lse_b,
                                       float* __restrict__ o, float* __restrict__ lse, int num_tokens, int num_heads,
                                       int head_dim) {
  const int th = blockIdx.x * blockDim.y + threadIdx.y;  // token * num_heads + head
  if (th >= num_tokens * num_heads) return;
  const float la = lse_a[th];
  const float lb = lse_b[th];
  const float m = fmaxf(la, lb);
  const float wa = expf(la - m);
  const float wb = expf(lb - m);
  const float inv = 1.f / (wa + wb);
  const size_t base = (size_t)th * head_dim;
  for (int d = threadIdx.x; d < head_dim; d += 32) {
    o[base + d] = (o_a[base + d] * wa + o_b[base + d] * wb) * inv;
  }
  if (threadIdx.x == 0) lse[th] = m + logf(wa + wb);
}

void merge_partial_attn(const float* o_a, const float* lse_a, const float* o_b, const float* lse_b, float* o,
                        float* lse, int num_tokens, int num_heads, int head_dim, cudaStream_t stream) {
  const dim3 block(32, 4);
  const int pairs = num_tokens * num_heads;
  const dim3 grid((pairs + 3) / 4);
  merge_partial_attn_f32<<<grid, block, 0, stream>>>(o_a, lse_a, o_b, lse_b, o, lse, num_tokens, num_heads,
                                                     head_dim);
}
