// Three-pass row softmax: max, sum of exponentials, normalize; THREADS threads per row.
#include <math.h>
#define THREADS 128
/* kerntune:
args  = ["y: out f32[rows * cols]", "x: in f32[rows * cols]", "cols: i32 = cols"]
sizes = [{ rows = 4096, cols = 4096 }, { rows = 1000, cols = 5003 }]
grid  = "rows"
block = "THREADS"
*/
__global__ void softmax3(float* y, const float* x, int cols) {
  __shared__ float buf[THREADS];
  const float* xr = x + (long long)blockIdx.x * cols;
  float* yr = y + (long long)blockIdx.x * cols;
  float m = -INFINITY;
  for (int i = threadIdx.x; i < cols; i += THREADS) m = fmaxf(m, xr[i]);
  buf[threadIdx.x] = m;
  __syncthreads();
  for (int s = THREADS / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) buf[threadIdx.x] = fmaxf(buf[threadIdx.x], buf[threadIdx.x + s]);
    __syncthreads();
  }
  const float mx = buf[0];
  __syncthreads();
  float sum = 0.f;
  for (int i = threadIdx.x; i < cols; i += THREADS) sum += expf(xr[i] - mx);
  buf[threadIdx.x] = sum;
  __syncthreads();
  for (int s = THREADS / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
    __syncthreads();
  }
  const float total = buf[0];
  for (int i = threadIdx.x; i < cols; i += THREADS) yr[i] = expf(xr[i] - mx) / total;
}

void softmax(float* y, const float* x, int rows, int cols) { softmax3<<<rows, THREADS>>>(y, x, cols); }
