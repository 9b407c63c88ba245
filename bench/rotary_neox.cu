// Rotary position embedding, GPT-NeoX style (vLLM's rotary_embedding with is_neox = true), fp16 query/key rotated in
// place, cos/sin cache [max_position, rot_dim] (cos in the first half, sin in the second). Written the way it
// starts out: one token per block, 256 threads, scalar loads of cos and sin for every element pair.
#include <cuda_fp16.h>
#include <stdint.h>

/* kerntune:
args  = ["positions: in i64[tokens] ~ randint(0, 4095)", "query: inout f16[tokens * num_heads * head_size]",
         "key: inout f16[tokens * num_kv_heads * head_size]", "cos_sin_cache: in f16[4096 * rot_dim] ~ uniform(-1, 1)",
         "rot_dim: i32 = rot_dim", "num_heads: i32 = num_heads", "num_kv_heads: i32 = num_kv_heads",
         "head_size: i32 = head_size"]
sizes = [{ tokens = 4096, num_heads = 32, num_kv_heads = 8, head_size = 128, rot_dim = 128 },
         { tokens = 8192, num_heads = 64, num_kv_heads = 8, head_size = 128, rot_dim = 128 },
         { tokens = 16, num_heads = 32, num_kv_heads = 32, head_size = 128, rot_dim = 128 },
         { tokens = 1000, num_heads = 28, num_kv_heads = 4, head_size = 72, rot_dim = 36 }]
grid  = "tokens"
block = "256"
*/
__global__ void rotary_neox_kernel(const int64_t* positions, __half* query, __half* key, const __half* cos_sin_cache,
                                   int rot_dim, int num_heads, int num_kv_heads, int head_size) {
  const int token = blockIdx.x;
  const __half* cache = cos_sin_cache + positions[token] * rot_dim;
  const int embed = rot_dim / 2;
  for (int i = threadIdx.x; i < num_heads * embed; i += 256) {
    const int head = i / embed, r = i % embed;
    __half* h = query + ((long long)token * num_heads + head) * head_size;
    const float c = __half2float(cache[r]), s = __half2float(cache[embed + r]);
    const float x = __half2float(h[r]), y = __half2float(h[embed + r]);
    h[r] = __float2half(x * c - y * s);
    h[embed + r] = __float2half(y * c + x * s);
  }
  for (int i = threadIdx.x; i < num_kv_heads * embed; i += 256) {
    const int head = i / embed, r = i % embed;
    __half* h = key + ((long long)token * num_kv_heads + head) * head_size;
    const float c = __half2float(cache[r]), s = __half2float(cache[embed + r]);
    const float x = __half2float(h[r]), y = __half2float(h[embed + r]);
    h[r] = __float2half(x * c - y * s);
    h[embed + r] = __float2half(y * c + x * s);
  }
}

void rotary_neox(const int64_t* positions, __half* query, __half* key, const __half* cos_sin_cache, int tokens,
                 int rot_dim, int num_heads, int num_kv_heads, int head_size, cudaStream_t stream) {
  rotary_neox_kernel<<<tokens, 256, 0, stream>>>(positions, query, key, cos_sin_cache, rot_dim, num_heads,
                                                 num_kv_heads, head_size);
}
