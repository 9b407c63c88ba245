// Multi-head latent attention rotary in fp16 (MiniCPM3 / DeepSeek-V2 shapes), in place, one block per token: each
// query head of head_dim channels keeps its rope_dim rotary channels last (the first head_dim - rope_dim are not
// rotated), and the single rotary key k_pe is the tail of each row of the latent buffer (k_stride = kv_lora_rank +
// rope_dim elements a token). NeoX pairs (i, i + rope_dim / 2); an fp16 cos_sin_cache [4096, rope_dim] (cosines,
// then sines), int32 positions. Both token strides are arguments; the offsets into a head and into a row are
// computed here from them.
#include <cuda_fp16.h>
/* kerntune:
args  = ["q: inout f16[T * H * D]", "k_pe: inout f16[T * (L + R)]", "positions: in i32[T] ~ randint(0, 4096)",
         "cos_sin_cache: in f16[4096 * R] ~ uniform(-1, 1)", "q_stride: i32 = H * D", "k_stride: i32 = L + R",
         "head_dim: i32 = D", "rope_dim: i32 = R", "num_heads: i32 = H"]
sizes = [{ T = 512, H = 40, D = 96, R = 32, L = 256 }, { T = 7, H = 16, D = 192, R = 64, L = 512 },
         { T = 300, H = 128, D = 192, R = 64, L = 512 }]
grid  = "T"
block = "128"
*/
__global__ void mla_rope_neox_f16(__half* __restrict__ q, __half* __restrict__ k_pe, const int* __restrict__ positions,
                                  const __half* __restrict__ cos_sin_cache, int q_stride, int k_stride, int head_dim,
                                  int rope_dim, int num_heads) {
  const int t = blockIdx.x;
  const int half = rope_dim / 2;
  const int nope = head_dim - rope_dim;
  const __half* cs = cos_sin_cache + (long long)positions[t] * rope_dim;
  for (int j = threadIdx.x; j < num_heads * half; j += blockDim.x) {
    const int h = j / half, i = j % half;
    const long long base = (long long)t * q_stride + (long long)h * head_dim + nope;
    const float c = __half2float(cs[i]), s = __half2float(cs[half + i]);
    const float x = __half2float(q[base + i]), y = __half2float(q[base + half + i]);
    q[base + i] = __float2half(x * c - y * s);
    q[base + half + i] = __float2half(y * c + x * s);
  }
  __half* kr = k_pe + (long long)t * k_stride + (k_stride - rope_dim);
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const float c = __half2float(cs[i]), s = __half2float(cs[half + i]);
    const float x = __half2float(kr[i]), y = __half2float(kr[half + i]);
    kr[i] = __float2half(x * c - y * s);
    kr[half + i] = __float2half(y * c + x * s);
  }
}
