// causal softmax over attention scores fp16, out of place, top-left aligned (query q sees keys 0 .. q), scores
// [batch * heads, q_len, k_len] in and probabilities of the same shape out, one block of 128 threads per score row,
// the query from the block index (blockIdx.x % q_len), the scale argument multiplied into each logit before the max
// and before expf, a shared-memory tree for the max and the sum. Only the keys the query sees are written: the
// masked part of the probabilities keeps what the buffer held (declared inout), as a kernel that fills the lower
// triangle of a preallocated attention matrix does.
#include <cuda_runtime.h>
#include <cuda_fp16.h>

/* kerntune:
args  = ["x: in f16[bh * q_len * k_len]", "probs: inout f16[bh * q_len * k_len]", "bh: i32 = bh",
         "q_len: i32 = q_len", "k_len: i32 = k_len", "scale: f32 = 0.0883883"]
sizes = [{ bh = 32, q_len = 256, k_len = 256 }, { bh = 16, q_len = 24, k_len = 100 }]
grid  = "bh * q_len"
block = "128"
atol  = 1e-4
*/
__global__ void causal_probs_lower(const __half* __restrict__ x, __half* __restrict__ probs, int bh, int q_len,
                                   int k_len, float scale) {
  __shared__ float red[128];
  const int q = blockIdx.x % q_len;
  const int n = min(q + 1, k_len);
  const __half* in = x + (size_t)blockIdx.x * k_len;
  __half* out = probs + (size_t)blockIdx.x * k_len;
  float m = -INFINITY;
  for (int k = threadIdx.x; k < n; k += blockDim.x) m = fmaxf(m, __half2float(in[k]) * scale);
  red[threadIdx.x] = m;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  m = red[0];
  __syncthreads();
  float sum = 0.f;
  for (int k = threadIdx.x; k < n; k += blockDim.x) sum += expf(__half2float(in[k]) * scale - m);
  red[threadIdx.x] = sum;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  const float inv = 1.f / red[0];
  for (int k = threadIdx.x; k < n; k += blockDim.x) out[k] = __float2half(expf(__half2float(in[k]) * scale - m) * inv);
}

void causal_probs(const __half* scores, __half* probs, int batch_heads, int q_len, int k_len, float scale,
                  cudaStream_t stream) {
  causal_probs_lower<<<batch_heads * q_len, 128, 0, stream>>>(scores, probs, batch_heads, q_len, k_len, scale);
}
