// Rotary embedding with GPT-J pairing (adjacent elements 2i, 2i + 1), fp16 query/key written out of place to
// q_out/k_out, separate fp32 cos and sin caches [max_position, rotary_dim / 2], int32 positions, partial rotary
// (rotary_dim <= head_dim: the rest of the head is copied through). A block per (token, head) over a 2-D grid
// whose y covers the query heads and then the key heads; head_dim / 2 threads, one per element pair.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>

/* kerntune:
args  = ["q: in f16[num_tokens * num_qo_heads * head_dim]", "k: in f16[num_tokens * num_kv_heads * head_dim]",
         "q_out: out f16[num_tokens * num_qo_heads * head_dim]", "k_out: out f16[num_tokens * num_kv_heads * head_dim]",
         "cos_cache: in f32[4096 * rotary_dim / 2] ~ uniform(-1, 1)",
         "sin_cache: in f32[4096 * rotary_dim / 2] ~ uniform(-1, 1)",
         "pos_ids: in i32[num_tokens] ~ randint(0, 4096)", "num_qo_heads: i32 = num_qo_heads",
         "num_kv_heads: i32 = num_kv_heads", "head_dim: i32 = head_dim", "rotary_dim: i32 = rotary_dim"]
sizes = [{ num_tokens = 8192, num_qo_heads = 32, num_kv_heads = 8, head_dim = 128, rotary_dim = 128 },
         { num_tokens = 32, num_qo_heads = 32, num_kv_heads = 8, head_dim = 128, rotary_dim = 128 },
         { num_tokens = 1001, num_qo_heads = 16, num_kv_heads = 16, head_dim = 256, rotary_dim = 64 }]
grid  = ["num_tokens", "num_qo_heads + num_kv_heads"]
block = "head_dim / 2"
*/
__global__ void rope_gptj_out_kernel(const __half* __restrict__ q, const __half* __restrict__ k,
                                     __half* __restrict__ q_out, __half* __restrict__ k_out,
                                     const float* __restrict__ cos_cache, const float* __restrict__ sin_cache,
                                     const int32_t* __restrict__ pos_ids, int num_qo_heads, int num_kv_heads,
                                     int head_dim, int rotary_dim) {
  const int token = blockIdx.x;
  const int h = blockIdx.y;
  const __half* src;
  __half* dst;
  if (h < num_qo_heads) {
    const size_t off = ((size_t)token * num_qo_heads + h) * head_dim;
    src = q + off;
    dst = q_out + off;
  } else {
    const size_t off = ((size_t)token * num_kv_heads + (h - num_qo_heads)) * head_dim;
    src = k + off;
    dst = k_out + off;
  }
  const int half_rot = rotary_dim / 2;
  const float* cos_row = cos_cache + (size_t)pos_ids[token] * half_rot;
  const float* sin_row = sin_cache + (size_t)pos_ids[token] * half_rot;
  for (int p = threadIdx.x; p < head_dim / 2; p += blockDim.x) {
    if (p < half_rot) {
      const float x0 = __half2float(src[2 * p]);
      const float x1 = __half2float(src[2 * p + 1]);
      const float c = cos_row[p];
      const float s = sin_row[p];
      dst[2 * p] = __float2half(x0 * c - x1 * s);
      dst[2 * p + 1] = __float2half(x1 * c + x0 * s);
    } else {
      dst[2 * p] = src[2 * p];
      dst[2 * p + 1] = src[2 * p + 1];
    }
  }
}

void rope_gptj_out_of_place(const __half* q, const __half* k, __half* q_out, __half* k_out, const float* cos_cache,
                            const float* sin_cache, const int32_t* pos_ids, int num_tokens, int num_qo_heads,
                            int num_kv_heads, int head_dim, int rotary_dim, cudaStream_t stream) {
  dim3 grid(num_tokens, num_qo_heads + num_kv_heads);
  dim3 block(head_dim / 2);
  rope_gptj_out_kernel<<<grid, block, 0, stream>>>(q, k, q_out, k_out, cos_cache, sin_cache, pos_ids, num_qo_heads,
                                                   num_kv_heads, head_dim, rotary_dim);
}
