// Column sum: one thread per column walks down the rows (strided by cols: not contiguous per thread).
/* kerntune:
args  = ["out: out f32[cols]", "x: in f32[rows * cols]", "rows: i32 = rows", "cols: i32 = cols"]
sizes = [{ rows = 4096, cols = 8192 }, { rows = 777, cols = 3001 }]
grid  = "cdiv(cols, 256)"
block = "256"
*/
__global__ void column_sum(float* out, const float* x, int rows, int cols) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c < cols) {
    float s = 0.f;
    for (int r = 0; r < rows; ++r) s += x[(long long)r * cols + c];
    out[c] = s;
  }
}

void colsum(float* out, const float* x, int rows, int cols) { column_sum<<<(cols + 255) / 256, 256>>>(out, x, rows, cols); }
