// Per-row absolute maximum (the statistic a per-tensor-row fp8 scale is computed from): one block of BLOCK threads
// per row, a strided pass over the row, then a shared-memory tree; the row's maximum goes to amax[row].
#include <cuda_runtime.h>
#include <cstdint>

#define BLOCK 256

/* kerntune:
args  = ["amax: out f32[rows]", "x: in f32[rows * cols]", "cols: i32 = cols"]
sizes = [{ rows = 8192, cols = 8192 }, { rows = 32, cols = 16384 }, { rows = 1003, cols = 5001 }]
grid  = "rows"
block = "256"
*/
__global__ void row_amax_kernel(float* __restrict__ amax, const float* __restrict__ x, int cols) {
  __shared__ float s[BLOCK];
  const float* row = x + (int64_t)blockIdx.x * cols;
  float m = 0.f;
  for (int c = threadIdx.x; c < cols; c += BLOCK) m = fmaxf(m, fabsf(row[c]));
  s[threadIdx.x] = m;
  __syncthreads();
  for (int k = BLOCK / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) s[threadIdx.x] = fmaxf(s[threadIdx.x], s[threadIdx.x + k]);
    __syncthreads();
  }
  if (threadIdx.x == 0) amax[blockIdx.x] = s[0];
}

void row_amax(float* amax, const float* x, int rows, int cols, cudaStream_t stream) {
  row_amax_kernel<<<rows, BLOCK, 0, stream>>>(amax, x, cols);
}
