// Cross-attention softmax over padded keys with a key count per (sequence, query) in fp16 (an encoder-decoder's
// padded cross attention where each query row carries its own number of visible keys, e.g. a chunked prefix):
// scores [batch, heads, q_len, kv_len]; lengths int32 [batch, q_len], broadcast over the heads; query (b, h, q)
// keeps keys [0, kv_lens[b * q_len + q]), clipped to kv_len, the rest written 0 (no key visible: a row of zeros).
// One warp a row, four rows a block of 128 threads on a 1-D grid; the row split into (b, h, q) by division; the
// scale multiplies the score before the max; fp32 math, __expf, a division by the sum per element, one rounding at
// the store.
#include <cuda_fp16.h>

/* kerntune:
args  = ["out: out f16[b * h * q * k]", "in: in f16[b * h * q * k]", "kv_lens: in i32[b * q] ~ randint(0, k + 1)",
         "batch: i32 = b", "heads: i32 = h", "q_len: i32 = q", "kv_len: i32 = k", "softmax_scale: f32 = 0.0883883"]
sizes = [{ b = 4, h = 32, q = 256, k = 1024 }, { b = 16, h = 8, q = 1, k = 4097 }, { b = 3, h = 5, q = 9, k = 101 }]
grid  = "cdiv(b * h * q, 4)"
block = 128
atol  = 1e-6  # probabilities of about 1 / keys; some queries see no key (a row of zeros)
*/
__global__ void padded_cross_softmax_kernel(half* out, const half* in, const int* kv_lens, int batch, int heads,
                                            int q_len, int kv_len, float softmax_scale) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int row = blockIdx.x * 4 + warp;
  if (row >= batch * heads * q_len) return;
  const int q = row % q_len;
  const int b = row / (heads * q_len);
  const int visible = min(kv_len, kv_lens[b * q_len + q]);
  const half* src = in + (size_t)row * kv_len;
  half* dst = out + (size_t)row * kv_len;
  float mx = -1e30f;
  for (int j = lane; j < visible; j += 32) mx = fmaxf(mx, __half2float(src[j]) * softmax_scale);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_down_sync(0xffffffffu, mx, o));
  mx = __shfl_sync(0xffffffffu, mx, 0);
  float sum = 0.f;
  for (int j = lane; j < visible; j += 32) sum += __expf(__half2float(src[j]) * softmax_scale - mx);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, o);
  sum = __shfl_sync(0xffffffffu, sum, 0);
  for (int j = lane; j < kv_len; j += 32)
    dst[j] = __float2half(j < visible ? __expf(__half2float(src[j]) * softmax_scale - mx) / sum : 0.f);
}

void padded_cross_softmax(half* out, const half* in, const int* kv_lens, int batch, int heads, int q_len, int kv_len,
                          float scale, cudaStream_t stream) {
  const int rows = batch * heads * q_len;
  padded_cross_softmax_kernel<<<(rows + 3) / 4, 128, 0, stream>>>(out, in, kv_lens, batch, heads, q_len, kv_len,
                                                                   scale);
}
