// RoPE over a flat index, one thread per element of q [tokens, n_heads, head_size] (fp16, in place): the threads of
// a head's first half rotate the NeoX pair (d, d + head_size / 2), the others return. No cos / sin cache: the angle
// is pos * 1 / theta^(2d / head_size), the base an INTEGER argument (rope_theta = 10000, as a model config holds it).
// Positions int64 per token; 256 threads per block over every element.
#include <cuda_fp16.h>
#include <cstdint>

/* kerntune:
args  = ["x: inout f16[T * H * D]", "pos: in i64[T] ~ randint(0, 4096)", "n_tokens: i32 = T", "n_heads: i32 = H",
         "head_size: i32 = D", "rope_theta: i32 = 10000"]
sizes = [{ T = 2048, H = 16, D = 128 }, { T = 3, H = 6, D = 64 }]
grid  = ["cdiv(T * H * D, 256)"]
block = 256
*/
__global__ void rope_flat_inplace(half* x, const int64_t* pos, int n_tokens, int n_heads, int head_size,
                                  int rope_theta) {
  const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= (int64_t)n_tokens * n_heads * head_size) return;
  const int d = (int)(e % head_size);
  const int half_d = head_size / 2;
  if (d >= half_d) return;
  const int64_t token = e / ((int64_t)n_heads * head_size);
  const float inv_freq = 1.0f / powf((float)rope_theta, (2.0f * d) / (float)head_size);
  const float ang = (float)pos[token] * inv_freq;
  const float c = cosf(ang), s = sinf(ang);
  const float a = __half2float(x[e]), b = __half2float(x[e + half_d]);
  x[e] = __float2half(a * c - b * s);
  x[e + half_d] = __float2half(b * c + a * s);
}
