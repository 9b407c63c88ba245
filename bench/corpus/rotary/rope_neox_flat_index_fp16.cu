// NeoX rotary embedding (fp16, in place) with separate fp32 cos and sin caches [max_position, rot_dim / 2] and
// int32 positions, written as one flat index over every (token, head, pair) of the query heads followed by the key
// heads, one pair per thread, ROPE_THREADS per block, 64-bit index arithmetic (lightllm / SGLang-style port).
#include <cuda_runtime.h>
#include <cuda_fp16.h>

#define ROPE_THREADS 256

/* kerntune:
args  = ["q: inout f16[num_tokens * num_heads * head_dim]", "k: inout f16[num_tokens * num_kv_heads * head_dim]",
         "cos_cache: in f32[4096 * rot_dim / 2] ~ uniform(-1, 1)", "sin_cache: in f32[4096 * rot_dim / 2] ~ uniform(-1, 1)",
         "positions: in i32[num_tokens] ~ randint(0, 4096)", "num_tokens: i32 = num_tokens",
         "num_heads: i32 = num_heads", "num_kv_heads: i32 = num_kv_heads", "head_dim: i32 = head_dim",
         "rot_dim: i32 = rot_dim"]
sizes = [{ num_tokens = 8192, num_heads = 32, num_kv_heads = 8, head_dim = 128, rot_dim = 128 },
         { num_tokens = 16, num_heads = 32, num_kv_heads = 32, head_dim = 128, rot_dim = 128 },
         { num_tokens = 1001, num_heads = 28, num_kv_heads = 4, head_dim = 128, rot_dim = 128 }]
grid  = "cdiv(num_tokens * (num_heads + num_kv_heads) * (rot_dim / 2), 256)"
block = "256"
*/
__global__ void rope_neox_flat_kernel(__half* q, __half* k, const float* __restrict__ cos_cache,
                                      const float* __restrict__ sin_cache, const int* __restrict__ positions,
                                      int num_tokens, int num_heads, int num_kv_heads, int head_dim, int rot_dim) {
  const int half_rot = rot_dim / 2;
  const int heads = num_heads + num_kv_heads;
  const long long total = (long long)num_tokens * heads * half_rot;
  const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= total) return;

  const int i = (int)(idx % half_rot);
  const long long th = idx / half_rot;
  const int h = (int)(th % heads);
  const int t = (int)(th / heads);
  __half* x = h < num_heads ? q + ((long long)t * num_heads + h) * head_dim
                            : k + ((long long)t * num_kv_heads + (h - num_heads)) * head_dim;
  const long long c_off = (long long)positions[t] * half_rot + i;
  const float c = cos_cache[c_off];
  const float s = sin_cache[c_off];
  const float x1 = __half2float(x[i]);
  const float x2 = __half2float(x[i + half_rot]);
  x[i] = __float2half(x1 * c - x2 * s);
  x[i + half_rot] = __float2half(x2 * c + x1 * s);
}

void rope_neox_inplace(__half* q, __half* k, const float* cos_cache, const float* sin_cache, const int* positions,
                       int num_tokens, int num_heads, int num_kv_heads, int head_dim, int rot_dim,
                       cudaStream_t stream) {
  const long long total = (long long)num_tokens * (num_heads + num_kv_heads) * (rot_dim / 2);
  const unsigned int blocks = (unsigned int)((total + ROPE_THREADS - 1) / ROPE_THREADS);
  rope_neox_flat_kernel<<<blocks, ROPE_THREADS, 0, stream>>>(q, k, cos_cache, sin_cache, positions, num_tokens,
                                                             num_heads, num_kv_heads, head_dim, rot_dim);
}
