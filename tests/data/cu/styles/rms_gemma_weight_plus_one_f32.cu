// Gemma RMSNorm fp32 (the weight stored as its offset from 1, added after it: `g[i] + 1.f`), extern "C", 8 rows
// per block (one warp each), a row-count argument, eps an argument inside the root, index arithmetic with `+ 1`
/* kerntune:
args  = ["x: in f32[n * d]", "g: in f32[d]", "y: out f32[n * d]", "n: i32 = n", "d: i32 = d", "eps: f32 = 1e-6"]
sizes = [{ n = 4096, d = 2048 }, { n = 3, d = 3072 }, { n = 257, d = 1001 }]
grid  = "cdiv(n, 8)"
block = [32, 8]
*/
extern "C" __global__ void gemma_norm_rows(const float* x, const float* g, float* y, int n, int d, float eps) {
  const int row = blockIdx.x * 8 + threadIdx.y;
  if (row >= n) return;
  const float* xr = x + (size_t)row * d;
  float s = 0.f;
  for (int i = threadIdx.x; i < d; i += 32) s += xr[i] * xr[i];
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  const float r = rsqrtf(s / d + eps);
  for (int i = threadIdx.x; i < d; i += 32) {
    const int next = i + 1;  // not an offset: integer index arithmetic
    y[(size_t)row * d + next - 1] = xr[i] * r * (g[i] + 1.f);
  }
}

void gemma_norm(const float* x, const float* g, float* y, int n, int d, float eps, cudaStream_t stream) {
  gemma_norm_rows<<<(n + 7) / 8, dim3(32, 8), 0, stream>>>(x, g, y, n, d, eps);
}
