// Row-scaled int8 -> fp32 dequantization over a 2-D grid: blockIdx.y the row, the x index the column, an index
// local for the element (rows padded to a leading dimension ld >= cols).
#include <cstdint>
/* kerntune:
args  = ["out: out f32[rows * ld]", "q: in i8[rows * ld]", "scale: in f32[rows]", "cols: i32 = cols", "ld: i32 = ld"]
sizes = [{ rows = 2048, cols = 4096, ld = 4096 }, { rows = 33, cols = 1001, ld = 1024 }]
grid  = ["cdiv(cols, 128)", "rows"]
block = "128"
*/
__global__ void dequant_rows(float* __restrict__ out, const int8_t* __restrict__ q, const float* __restrict__ scale,
                             int cols, int ld) {
  const int row = blockIdx.y;
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col < cols) {
    const long long e = (long long)row * ld + col;
    out[e] = (float)q[e] * scale[row];
  }
}

void dequant(float* out, const int8_t* q, const float* scale, int rows, int cols, int ld) {
  const int threads = 128;
  dim3 grid((cols + threads - 1) / threads, rows);
  dequant_rows<<<grid, threads>>>(out, q, scale, cols, ld);
}
