// Column sum (fp32): out[c] = sum over rows of x[r, c], one thread per column walking down the rows (coalesced
// across the threads of a warp), 256 threads per block. Sequential fp32 accumulation over the rows.
// Tolerance: a correct rewrite that sums in another order (a tree over rows) differs from the sequential sum by
// ~sqrt(rows) * ulp(|partial sum|), about 2e-4 for 8192 normal rows with sums near zero, above the default f32
// atol of 1e-5; atol is 1e-2 and rtol 1e-4.
#include <cuda_runtime.h>

/* kerntune:
args  = ["x: in f32[rows * cols]", "out: out f32[cols]", "rows: i32 = rows", "cols: i32 = cols"]
sizes = [{ rows = 8192, cols = 4096 }, { rows = 32, cols = 14336 }, { rows = 1001, cols = 4099 }]
grid  = "cdiv(cols, 256)"
block = "256"
rtol  = 1e-4
atol  = 1e-2
*/
__global__ void column_sum_kernel(const float* __restrict__ x, float* __restrict__ out, int rows, int cols) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float acc = 0.f;
  for (int r = 0; r < rows; ++r) acc += x[(long long)r * cols + c];
  out[c] = acc;
}

void column_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
  dim3 block(256);
  dim3 grid((cols + 255) / 256);
  column_sum_kernel<<<grid, block, 0, stream>>>(x, out, rows, cols);
}
