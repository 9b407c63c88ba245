// Column max (bf16 in, bf16 out): one thread per column walks down the rows taking the max in fp32.
#include <cuda_bf16.h>
#include <math.h>

/* kerntune:
args  = ["x: in bf16[rows * cols]", "out: out bf16[cols]", "rows: i32 = rows", "cols: i32 = cols"]
sizes = [{ rows = 2048, cols = 8192 }, { rows = 333, cols = 4099 }]
grid  = "cdiv(cols, 128)"
block = "128"
*/
__global__ void column_max_bf16(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ out, int rows,
                                int cols) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= cols) return;
  float m = -INFINITY;
  for (int r = 0; r < rows; r++) m = fmaxf(m, __bfloat162float(x[(size_t)r * cols + col]));
  out[col] = __float2bfloat16(m);
}

#define THREADS 128
void launch_column_max(const __nv_bfloat16* x, __nv_bfloat16* out, int rows, int cols, cudaStream_t stream) {
  const int blocks = (cols + THREADS - 1) / THREADS;
  column_max_bf16<<<blocks, THREADS, 0, stream>>>(x, out, rows, cols);
}
