// NeoX rotary of the query heads only, in place in a fused fp16 qkv row [tokens, row_stride] (the key heads are
// rotated where the paged-KV cache is written, the values never): a grid (query heads, tokens), the number of query
// heads only in the launch; int32 positions, cos and sin tables [2048, rot_dim / 2] in fp32, a block of 64 threads
// walking the head's rotary pairs.
#include <cuda_fp16.h>
/* kerntune:
args  = ["pos: in i32[num_tokens] ~ randint(0, 2048)", "cos_tab: in f32[2048 * rot_dim / 2] ~ uniform(-1, 1)",
         "sin_tab: in f32[2048 * rot_dim / 2] ~ uniform(-1, 1)",
         "qkv: inout f16[num_tokens * (num_heads + 2 * num_kv_heads) * head_size]",
         "row_stride: i32 = (num_heads + 2 * num_kv_heads) * head_size", "head_size: i32 = head_size",
         "rot_dim: i32 = rot_dim"]
sizes = [{ num_tokens = 64, num_heads = 32, num_kv_heads = 8, head_size = 128, rot_dim = 128 },
         { num_tokens = 7, num_heads = 12, num_kv_heads = 4, head_size = 64, rot_dim = 32 },
         { num_tokens = 300, num_heads = 20, num_kv_heads = 20, head_size = 96, rot_dim = 48 }]
grid  = ["num_heads", "num_tokens"]
block = "64"
*/
__global__ void rope_q_of_qkv(const int* __restrict__ pos, const float* __restrict__ cos_tab,
                              const float* __restrict__ sin_tab, __half* __restrict__ qkv, int row_stride,
                              int head_size, int rot_dim) {
  const int half = rot_dim / 2;
  const int t = blockIdx.y;
  __half* q = qkv + (long long)t * row_stride + (long long)blockIdx.x * head_size;
  const float* c = cos_tab + (long long)pos[t] * half;
  const float* s = sin_tab + (long long)pos[t] * half;
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const float x = __half2float(q[i]), y = __half2float(q[i + half]);
    q[i] = __float2half(x * c[i] - y * s[i]);
    q[i + half] = __float2half(y * c[i] + x * s[i]);
  }
}
