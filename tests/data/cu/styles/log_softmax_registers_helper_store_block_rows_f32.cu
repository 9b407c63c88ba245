// Log-softmax fp32 over rows of at most 8 * 128 values, one block of 128 threads per row: the row in a register
// array, max and sum by shared-memory block reductions, then v[i] = v[i] - max - logf(sum) kept in the registers and
// written out by a store helper (as code rendered per row length writes it).
#include <cuda_runtime.h>

__device__ __forceinline__ void store_items(float* dst, const float (&v)[8], int n) {
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int c = threadIdx.x + i * 128;
    if (c < n) dst[c] = v[i];
  }
}

/* kerntune:
args  = ["logits: in f32[rows * n]", "logprobs: out f32[rows * n]", "n: i32 = n"]
sizes = [{ rows = 16384, n = 1000 }, { rows = 7, n = 513 }]
grid  = "rows"
block = 128
*/
__global__ void log_softmax_rows(const float* logits, float* logprobs, int n) {
  __shared__ float red[128];
  const float* src = logits + (long long)blockIdx.x * n;
  float v[8];
  float mx = -INFINITY;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int c = threadIdx.x + i * 128;
    v[i] = c < n ? src[c] : -INFINITY;
    mx = fmaxf(mx, v[i]);
  }
  red[threadIdx.x] = mx;
  __syncthreads();
  for (int s = 64; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  mx = red[0];
  __syncthreads();
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < 8; ++i) sum += threadIdx.x + i * 128 < n ? expf(v[i] - mx) : 0.f;
  red[threadIdx.x] = sum;
  __syncthreads();
  for (int s = 64; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  const float lse = mx + logf(red[0]);
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = v[i] - lse;
  store_items(logprobs + (long long)blockIdx.x * n, v, n);
}
