// ALiBi attention probabilities with the logit in a helper of its own, all fp16 (scores, 0/1 keep-mask [batch,
// q_len, k_len], slopes [heads], probabilities): logit(k) = scale * score + (slope * (k - q) + (1 - keep) * -10000)
// computed in fp32 by a __device__ function the three passes call; exp by expf, the sum + 1e-6 inverted by
// __fdividef, each probability rounded once to fp16. One block of 128 threads per (query, head, batch) row, a 3-D
// grid, keys strided by the block, reductions by a shared-memory halving tree.
// Tolerance: probabilities are ~1/k_len and below, far under the f16 default atol of 1e-2, so atol is 1e-6.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

constexpr int kRowThreads = 128;

__device__ __forceinline__ float alibi_logit(const __half* __restrict__ scores, const __half* __restrict__ keep,
                                             float slope, float scale, long long row, long long keep_row, int k,
                                             int q) {
  float bias = slope * (float)(k - q);
  bias += (1.0f - __half2float(keep[keep_row + k])) * -10000.0f;
  return scale * __half2float(scores[row + k]) + bias;
}

__device__ __forceinline__ float block_max(float v, float* red) {
  red[threadIdx.x] = v;
  __syncthreads();
  for (int s = kRowThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  const float r = red[0];
  __syncthreads();
  return r;
}

__device__ __forceinline__ float block_sum(float v, float* red) {
  red[threadIdx.x] = v;
  __syncthreads();
  for (int s = kRowThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  const float r = red[0];
  __syncthreads();
  return r;
}

/* kerntune:
args  = ["probs: out f16[batch * heads * q_len * k_len]", "scores: in f16[batch * heads * q_len * k_len]",
         "keep: in f16[batch * q_len * k_len] ~ randint(0, 2)", "slopes: in f16[heads] ~ uniform(0.004, 0.5)",
         "scale: f32 = 0.125", "heads: i32 = heads", "q_len: i32 = q_len", "k_len: i32 = k_len"]
sizes = [{ batch = 2, heads = 16, q_len = 512, k_len = 1024 }, { batch = 8, heads = 32, q_len = 1, k_len = 2048 },
         { batch = 3, heads = 7, q_len = 45, k_len = 333 }]
grid  = ["q_len", "heads", "batch"]
block = "128"
atol  = 1e-6
*/
__global__ void __launch_bounds__(kRowThreads) alibi_probs_rows(__half* __restrict__ probs,
                                                                const __half* __restrict__ scores,
                                                                const __half* __restrict__ keep,
                                                                const __half* __restrict__ slopes, float scale,
                                                                int heads, int q_len, int k_len) {
  __shared__ float red[kRowThreads];
  const int q = blockIdx.x;
  const int h = blockIdx.y;
  const int b = blockIdx.z;
  const long long row = ((long long)(b * heads + h) * q_len + q) * k_len;
  const long long keep_row = ((long long)b * q_len + q) * k_len;
  const float slope = __half2float(slopes[h]);
  float mx = -1e20f;
  for (int k = threadIdx.x; k < k_len; k += kRowThreads)
    mx = fmaxf(mx, alibi_logit(scores, keep, slope, scale, row, keep_row, k, q));
  mx = block_max(mx, red);
  float sum = 0.0f;
  for (int k = threadIdx.x; k < k_len; k += kRowThreads)
    sum += expf(alibi_logit(scores, keep, slope, scale, row, keep_row, k, q) - mx);
  const float inv = __fdividef(1.0f, block_sum(sum, red) + 1e-6f);
  for (int k = threadIdx.x; k < k_len; k += kRowThreads)
    probs[row + k] = __float2half(expf(alibi_logit(scores, keep, slope, scale, row, keep_row, k, q) - mx) * inv);
}

void alibi_probs(__half* probs, const __half* scores, const __half* keep, const __half* slopes, float scale,
                 int batch, int heads, int q_len, int k_len, cudaStream_t stream) {
  alibi_probs_rows<<<dim3(q_len, heads, batch), kRowThreads, 0, stream>>>(probs, scores, keep, slopes, scale, heads,
                                                                         q_len, k_len);
}
