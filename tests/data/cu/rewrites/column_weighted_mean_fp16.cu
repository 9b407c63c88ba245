// Weighted mean over rows (fp16 in and out, fp32 weights per row): out[c] = sum_r w[r] * x[r, c] / rows.
#include <cuda_fp16.h>

/* kerntune:
args  = ["out: out f16[cols]", "x: in f16[rows * cols]", "w: in f32[rows]", "rows: i32 = rows", "cols: i32 = cols"]
sizes = [{ rows = 4096, cols = 4096 }, { rows = 1000, cols = 3003 }]
grid  = "cdiv(cols, 256)"
block = "256"
rtol  = 1e-2
atol  = 1e-2
*/
__global__ void weighted_mean_rows(half* out, const half* x, const float* w, int rows, int cols) {
  int c = threadIdx.x + blockIdx.x * blockDim.x;
  if (c < cols) {
    float acc = 0.0f;
    for (int r = 0; r < rows; ++r) {
      acc += w[r] * __half2float(x[r * cols + c]);
    }
    out[c] = __float2half(acc / (float)rows);
  }
}

void weighted_mean(half* out, const half* x, const float* w, int rows, int cols) {
  dim3 block(256);
  dim3 grid((cols + 255) / 256);
  weighted_mean_rows<<<grid, block>>>(out, x, w, rows, cols);
}
