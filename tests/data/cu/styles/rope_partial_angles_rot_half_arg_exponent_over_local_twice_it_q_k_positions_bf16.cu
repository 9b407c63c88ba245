// NeoX rotary (bf16, in place) over query and key with positions, only the first 2 * rot_half channels of each head
// rotated (the kernel takes the rotary HALF as its argument), the angles computed in the kernel from a power of the
// base whose exponent divides by a local holding twice that argument; a block a token, a loop over its (head, pair)
// items; fp32 math, one rounding at the store.
#include <cuda_runtime.h>
#include <cuda_bf16.h>

/* kerntune:
args  = ["positions: in i64[tokens] ~ randint(0, 4096)", "q: inout bf16[tokens * heads * head_dim]",
         "k: inout bf16[tokens * kv_heads * head_dim]", "heads: i32 = heads", "kv_heads: i32 = kv_heads",
         "head_dim: i32 = head_dim", "rot_half: i32 = rot_half", "theta: f32 = 10000.0"]
sizes = [{ tokens = 4096, heads = 32, kv_heads = 8, head_dim = 128, rot_half = 32 },
         { tokens = 3, heads = 16, kv_heads = 16, head_dim = 64, rot_half = 32 },
         { tokens = 257, heads = 6, kv_heads = 2, head_dim = 80, rot_half = 20 }]
grid  = "tokens"
block = 128
*/
__global__ void rope_partial_qk(const long long* __restrict__ positions, __nv_bfloat16* __restrict__ q,
                                __nv_bfloat16* __restrict__ k, int heads, int kv_heads, int head_dim, int rot_half,
                                float theta) {
  const int t = blockIdx.x;
  const int rot = rot_half * 2;
  const float p = (float)positions[t];
  for (int i = threadIdx.x; i < (heads + kv_heads) * rot_half; i += blockDim.x) {
    const int h = i / rot_half, j = i % rot_half;
    const float inv = powf(theta, -(float)(2 * j) / (float)rot);
    float s, c;
    sincosf(p * inv, &s, &c);
    __nv_bfloat16* x = h < heads ? q + ((long long)t * heads + h) * head_dim
                                 : k + ((long long)t * kv_heads + (h - heads)) * head_dim;
    const float a = __bfloat162float(x[j]), b = __bfloat162float(x[j + rot_half]);
    x[j] = __float2bfloat16(a * c - b * s);
    x[j + rot_half] = __float2bfloat16(b * c + a * s);
  }
}

void rope_partial(const long long* positions, __nv_bfloat16* q, __nv_bfloat16* k, int tokens, int heads, int kv_heads,
                  int head_dim, int rot_half, float theta, cudaStream_t stream) {
  rope_partial_qk<<<tokens, 128, 0, stream>>>(positions, q, k, heads, kv_heads, head_dim, rot_half, theta);
}
