// Log-softmax of fp32 scores read at a row stride of their own (ld >= n: rows of a wider, padded buffer) into dense
// fp32 rows, one 128-thread block per row, two passes: max and sum of expf by shared-memory tree reductions, then
// x - lse with lse = max + logf(sum) kept in shared memory (PyTorch's LogSoftMax epilogue); the row count an argument
#include <cuda_runtime.h>
/* kerntune:
args  = ["out: out f32[tokens * n]", "scores: in f32[tokens * ld]", "tokens: i32 = tokens", "n: i32 = n",
         "ld: i32 = ld"]
sizes = [{ tokens = 64, n = 1000, ld = 1024 }, { tokens = 7, n = 4000, ld = 4099 }, { tokens = 300, n = 2048, ld = 2048 }]
grid  = "tokens"
block = 128
*/
__global__ void log_softmax_strided(float* out, const float* scores, int tokens, int n, int ld) {
  __shared__ float red[128];
  __shared__ float lse;
  const int t = blockIdx.x;
  if (t >= tokens) return;
  const float* x = scores + (long long)t * ld;
  float m = -INFINITY;
  for (int i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, x[i]);
  red[threadIdx.x] = m;
  __syncthreads();
  for (int s = 64; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  m = red[0];
  __syncthreads();
  float sum = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) sum += expf(x[i] - m);
  red[threadIdx.x] = sum;
  __syncthreads();
  for (int s = 64; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) lse = m + logf(red[0]);
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[(long long)t * n + i] = x[i] - lse;
}
