// Partial NeoX rotary embedding (only the first rot_dim channels of each head rotated; channels rot_dim..head_dim
// left as they are, as for models with a partial_rotary_factor such as 0.5), applied in place inside the fused QKV
// projection output the way serving code does before the paged-KV write: qkv [num_tokens, (num_heads +
// 2 * num_kv_heads) * head_dim] bf16 holds a token's query heads, then its key heads, then its value heads (never
// touched). Because the key heads follow the query heads in the row, head h (q or k) starts at h * head_dim.
// NeoX pairing inside the rotated part: (i, i + rot_dim / 2). int64 positions, one bf16 cos_sin_cache
// [max_position, rot_dim] with the cos half first and the sin half second (as vLLM builds it), math in fp32 and one
// rounding per output. A 2-D grid (token, head) over the q and k heads, one block of rot_dim / 2 threads per
// (token, head), one pair per thread; the row stride comes from the host as an int64.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdint>

/* kerntune:
args  = ["qkv: inout bf16[num_tokens * (num_heads + 2 * num_kv_heads) * head_dim]",
         "positions: in i64[num_tokens] ~ randint(0, 4096)",
         "cos_sin_cache: in bf16[4096 * rot_dim] ~ uniform(-1, 1)",
         "qkv_stride: i64 = (num_heads + 2 * num_kv_heads) * head_dim",
         "head_dim: i32 = head_dim", "rot_dim: i32 = rot_dim"]
sizes = [{ num_tokens = 8192, num_heads = 32, num_kv_heads = 8, head_dim = 128, rot_dim = 64 },
         { num_tokens = 16, num_heads = 32, num_kv_heads = 2, head_dim = 128, rot_dim = 64 },
         { num_tokens = 1001, num_heads = 25, num_kv_heads = 5, head_dim = 80, rot_dim = 40 }]
grid  = ["num_tokens", "num_heads + num_kv_heads"]
block = "rot_dim / 2"
*/
__global__ void partial_rotary_fused_qkv_kernel(__nv_bfloat16* __restrict__ qkv,              // [tokens, qkv_stride]
                                                const int64_t* __restrict__ positions,         // [tokens]
                                                const __nv_bfloat16* __restrict__ cos_sin_cache,  // [max_pos, rot_dim]
                                                const int64_t qkv_stride, const int head_dim, const int rot_dim) {
  const int token_idx = blockIdx.x;
  const int head_idx = blockIdx.y;  // [0, num_heads) are q heads, [num_heads, num_heads + num_kv_heads) k heads
  const int embed_dim = rot_dim / 2;
  const int rot_offset = threadIdx.x;
  if (rot_offset >= embed_dim) return;

  const int64_t pos = positions[token_idx];
  const __nv_bfloat16* cos_ptr = cos_sin_cache + pos * rot_dim;
  const __nv_bfloat16* sin_ptr = cos_ptr + embed_dim;

  // k heads sit right after the q heads in the fused row, so one offset formula covers both
  __nv_bfloat16* head_ptr = qkv + token_idx * qkv_stride + static_cast<int64_t>(head_idx) * head_dim;

  const int x_index = rot_offset;
  const int y_index = rot_offset + embed_dim;
  const float cos = __bfloat162float(cos_ptr[rot_offset]);
  const float sin = __bfloat162float(sin_ptr[rot_offset]);
  const float x = __bfloat162float(head_ptr[x_index]);
  const float y = __bfloat162float(head_ptr[y_index]);
  head_ptr[x_index] = __float2bfloat16_rn(x * cos - y * sin);
  head_ptr[y_index] = __float2bfloat16_rn(y * cos + x * sin);
  // channels [rot_dim, head_dim) of the head pass through untouched
}

// qkv: [num_tokens, (num_heads + 2 * num_kv_heads) * head_dim], rotated in place (q and k heads, first rot_dim
// channels of each); positions: [num_tokens]; cos_sin_cache: [max_position, rot_dim]. rot_dim is even and
// rot_dim <= head_dim.
void partial_rotary_embedding_fused_qkv(__nv_bfloat16* qkv, const int64_t* positions,
                                        const __nv_bfloat16* cos_sin_cache, int num_tokens, int num_heads,
                                        int num_kv_heads, int head_dim, int rot_dim, cudaStream_t stream) {
  const int64_t qkv_stride = static_cast<int64_t>(num_heads + 2 * num_kv_heads) * head_dim;
  dim3 grid(num_tokens, num_heads + num_kv_heads);
  dim3 block(rot_dim / 2);
  partial_rotary_fused_qkv_kernel<<<grid, block, 0, stream>>>(qkv, positions, cos_sin_cache, qkv_stride, head_dim,
                                                              rot_dim);
}
