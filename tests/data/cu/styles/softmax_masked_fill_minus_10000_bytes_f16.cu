// Attention probabilities in the Megatron / Transformer Engine scaled_masked_softmax convention: fp16 scores [batch,
// heads, q_len, k_len] times a scale, a byte mask [batch, 1, q_len, k_len] shared by the heads where a nonzero byte
// MASKS the key out: the logit is then replaced by -10000 (not -inf), so a row's max is -10000 exactly when every key
// is masked, and such a row is written as zeros (scale_value = max == -10000 ? 0 : 1). fp32 math with expf, one
// rounding at the store. A block of 128 threads per row (launched over (q_len, heads, batch)), block reductions in
// shared memory.
#include <cuda_fp16.h>
#include <cstdint>

/* kerntune:
args  = ["dst: out f16[b * h * q * k]", "src: in f16[b * h * q * k] ~ uniform(-8, 8)",
         "mask: in u8[b * q * k] ~ randint(0, 2)", "scale: f32 = 0.125", "heads: i32 = h", "q_len: i32 = q",
         "k_len: i32 = k"]
sizes = [{ b = 2, h = 16, q = 128, k = 512 }, { b = 3, h = 5, q = 7, k = 77 }]
grid  = ["q", "h", "b"]
block = "128"
atol  = 1e-5
*/
__global__ void scaled_masked_softmax_rows(__half* __restrict__ dst, const __half* __restrict__ src,
                                           const uint8_t* __restrict__ mask, float scale, int heads, int q_len,
                                           int k_len) {
  __shared__ float red[4];
  const int q = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const size_t row = ((size_t)b * heads + h) * q_len + q;
  const __half* x = src + row * k_len;
  const uint8_t* mk = mask + ((size_t)b * q_len + q) * k_len;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < k_len; j += blockDim.x) {
    const float v = mk[j] != 0 ? -10000.0f : __half2float(x[j]) * scale;
    mx = fmaxf(mx, v);
  }
  for (int o = 16; o; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  if (lane == 0) red[warp] = mx;
  __syncthreads();
  mx = fmaxf(fmaxf(red[0], red[1]), fmaxf(red[2], red[3]));
  __syncthreads();
  float sum = 0.f;
  for (int j = threadIdx.x; j < k_len; j += blockDim.x) {
    const float v = mk[j] != 0 ? -10000.0f : __half2float(x[j]) * scale;
    sum += expf(v - mx);
  }
  for (int o = 16; o; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane == 0) red[warp] = sum;
  __syncthreads();
  sum = red[0] + red[1] + red[2] + red[3];
  const float keep = mx == -10000.0f ? 0.f : 1.f;
  for (int j = threadIdx.x; j < k_len; j += blockDim.x) {
    const float v = mk[j] != 0 ? -10000.0f : __half2float(x[j]) * scale;
    dst[row * k_len + j] = __float2half(expf(v - mx) * keep / sum);
  }
}

void scaled_masked_softmax(__half* dst, const __half* src, const uint8_t* mask, float scale, int batch, int heads,
                           int q_len, int k_len, cudaStream_t stream) {
  scaled_masked_softmax_rows<<<dim3(q_len, heads, batch), 128, 0, stream>>>(dst, src, mask, scale, heads, q_len,
                                                                            k_len);
}
