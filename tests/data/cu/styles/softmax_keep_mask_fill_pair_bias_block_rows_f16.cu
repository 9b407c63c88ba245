// Evoformer-style attention softmax fp16 out of place: l = x * scale + bias (in fp32), replaced by -1e9 where the
// keep-mask is 0; scores [batch, heads, q, k], the mask [batch, k] (one row per batch: consecutive rows share it),
// the pair bias [heads, q, k] shared by the batch (broadcast over the leading dimension). A block of 256 threads per
// row, the row staged as float in shared memory, block reductions through shared memory.
#include <cuda_fp16.h>

/* kerntune:
args  = ["probs: out f16[B * H * Q * K]", "scores: in f16[B * H * Q * K]", "mask: in f16[B * K] ~ randint(0, 2)",
         "pair_bias: in f16[H * Q * K]", "n_rows: i32 = B * H * Q", "keys: i32 = K", "heads_q: i32 = H * Q",
         "scale: f32 = 0.125"]
sizes = [{ B = 16, H = 8, Q = 256, K = 256 }, { B = 3, H = 4, Q = 37, K = 37 }]
grid  = "B * H * Q"
block = 256
smem  = "K * 4"
atol  = 1e-6
*/
__global__ void evo_softmax(__half* probs, const __half* scores, const __half* mask, const __half* pair_bias,
                            int n_rows, int keys, int heads_q, float scale) {
  extern __shared__ float row[];
  __shared__ float red[256];
  const int r = blockIdx.x;
  if (r >= n_rows) return;
  const __half* m = mask + (long long)(r / heads_q) * keys;
  const __half* b = pair_bias + (long long)(r % heads_q) * keys;
  const __half* x = scores + (long long)r * keys;
  float mx = -INFINITY;
  for (int k = threadIdx.x; k < keys; k += blockDim.x) {
    const float l = __half2float(x[k]) * scale + __half2float(b[k]);
    const float v = __half2float(m[k]) != 0.f ? l : -1e9f;
    row[k] = v;
    mx = fmaxf(mx, v);
  }
  red[threadIdx.x] = mx;
  __syncthreads();
  for (int s = 128; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  mx = red[0];
  __syncthreads();
  float sum = 0.f;
  for (int k = threadIdx.x; k < keys; k += blockDim.x) {
    const float e = expf(row[k] - mx);
    row[k] = e;
    sum += e;
  }
  red[threadIdx.x] = sum;
  __syncthreads();
  for (int s = 128; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  const float inv = 1.f / red[0];
  for (int k = threadIdx.x; k < keys; k += blockDim.x) probs[(long long)r * keys + k] = __float2half(row[k] * inv);
}
