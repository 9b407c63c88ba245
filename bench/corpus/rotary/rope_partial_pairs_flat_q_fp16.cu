// Partial rotary (only the first rot_dim of each head is rotated, the rest left as it is), as GLM/ChatGLM-style
// models apply it: GPT-J pairs, one half2 table [max_position, rot_dim / 2] of (cos, sin) per pair, query only, in
// place, int64 positions. One flat index over (token, head, pair), 256 threads a block, 64-bit index math.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>

/* kerntune:
args  = ["q: inout f16[tokens * heads * head_dim]", "rope_table: in f16[8192 * rot_dim] ~ uniform(-1, 1)",
         "pos_ids: in i64[tokens] ~ randint(0, 8192)", "tokens: i32 = tokens", "heads: i32 = heads",
         "head_dim: i32 = head_dim", "rot_dim: i32 = rot_dim"]
sizes = [{ tokens = 16384, heads = 32, head_dim = 128, rot_dim = 64 }, { tokens = 32, heads = 32, head_dim = 128, rot_dim = 64 },
         { tokens = 999, heads = 14, head_dim = 96, rot_dim = 48 }]
grid  = "cdiv(tokens * heads * (rot_dim / 2), 256)"
block = "256"
*/
__global__ void rope_partial_q_kernel(__half* __restrict__ q, const __half2* __restrict__ rope_table,
                                      const int64_t* __restrict__ pos_ids, int tokens, int heads, int head_dim,
                                      int rot_dim) {
  const int64_t half_rot = rot_dim / 2;
  const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= (int64_t)tokens * heads * half_rot) return;
  const int64_t pair = idx % half_rot;
  const int64_t th = idx / half_rot;  // token * heads + head
  const int64_t token = th / heads;
  const float2 cs = __half22float2(rope_table[pos_ids[token] * half_rot + pair]);
  __half* x = q + th * head_dim + 2 * pair;
  const float x0 = __half2float(x[0]), x1 = __half2float(x[1]);
  x[0] = __float2half(x0 * cs.x - x1 * cs.y);
  x[1] = __float2half(x1 * cs.x + x0 * cs.y);
}

void rope_partial_q(__half* q, const __half2* rope_table, const int64_t* pos_ids, int tokens, int heads,
                    int head_dim, int rot_dim, cudaStream_t stream) {
  const int64_t n = (int64_t)tokens * heads * (rot_dim / 2);
  const int threads = 256;
  const int blocks = (int)((n + threads - 1) / threads);
  rope_partial_q_kernel<<<blocks, threads, 0, stream>>>(q, rope_table, pos_ids, tokens, heads, head_dim, rot_dim);
}
