// RMSNorm fp32, a row-count argument, 4 rows per block (blockDim.y), eps a literal outside the root
/* kerntune:
args  = ["x: in f32[n_rows * dim]", "w: in f32[dim]", "y: out f32[n_rows * dim]", "n_rows: i32 = n_rows", "dim: i32 = dim"]
sizes = [{ n_rows = 1024, dim = 2048 }, { n_rows = 37, dim = 1027 }]
grid  = "cdiv(n_rows, 4)"
block = ["32", "4"]
*/
__global__ void rmsnorm_rows(const float* x, const float* w, float* y, int n_rows, int dim) {
  int r = blockIdx.x * blockDim.y + threadIdx.y;
  if (r >= n_rows) return;
  const float* xr = x + (size_t)r * dim;
  float acc = 0.f;
  for (int i = threadIdx.x; i < dim; i += 32) acc += xr[i] * xr[i];
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  float scale = 1.0f / (sqrtf(acc / dim) + 1e-6f);
  for (int i = threadIdx.x; i < dim; i += 32) y[(size_t)r * dim + i] = xr[i] * scale * w[i];
}

void rmsnorm(const float* x, const float* w, float* y, int n_rows, int dim, cudaStream_t stream) {
  rmsnorm_rows<<<(n_rows + 3) / 4, dim3(32, 4), 0, stream>>>(x, w, y, n_rows, dim);
}
