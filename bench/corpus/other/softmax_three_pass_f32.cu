// Row softmax (fp32) in three passes, each re-reading the row from global memory: the maximum, the sum of
// exp(x - max), and the normalized write; one row per block of THREADS threads, shared-memory tree reductions.
// Tolerance: probabilities are ~1/cols and far below, so atol is 1e-9 instead of the f32 default 1e-5.
#include <cuda_runtime.h>

#define THREADS 128

/* kerntune:
args  = ["x: in f32[rows * cols]", "y: out f32[rows * cols]", "cols: i32 = cols"]
sizes = [{ rows = 4096, cols = 8192 }, { rows = 64, cols = 4096 }, { rows = 1000, cols = 5003 }]
grid  = "rows"
block = "128"
atol  = 1e-9
*/
__global__ void softmax_three_pass(const float* x, float* y, int cols) {
  __shared__ float buf[THREADS];
  const float* row = x + (long long)blockIdx.x * cols;
  float* dst = y + (long long)blockIdx.x * cols;
  const int t = threadIdx.x;

  float m = -INFINITY;
  for (int i = t; i < cols; i += THREADS) m = fmaxf(m, row[i]);
  buf[t] = m;
  __syncthreads();
  for (int s = THREADS / 2; s > 0; s >>= 1) {
    if (t < s) buf[t] = fmaxf(buf[t], buf[t + s]);
    __syncthreads();
  }
  const float row_max = buf[0];
  __syncthreads();

  float sum = 0.f;
  for (int i = t; i < cols; i += THREADS) sum += expf(row[i] - row_max);
  buf[t] = sum;
  __syncthreads();
  for (int s = THREADS / 2; s > 0; s >>= 1) {
    if (t < s) buf[t] += buf[t + s];
    __syncthreads();
  }
  const float row_sum = buf[0];

  for (int i = t; i < cols; i += THREADS) dst[i] = expf(row[i] - row_max) / row_sum;
}

void softmax_f32(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
  softmax_three_pass<<<rows, THREADS, 0, stream>>>(x, y, cols);
}
