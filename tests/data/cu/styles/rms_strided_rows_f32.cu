// RMSNorm fp32 of the first n columns of rows ld elements apart (a slice of a wider buffer), into contiguous rows;
// a row-count argument, a warp per row, 8 rows per block.
/* kerntune:
args  = ["y: out f32[R * n]", "x: in f32[R * ld]", "w: in f32[n]", "R: i32 = R", "n: i32 = n", "ld: i32 = ld"]
sizes = [{ R = 256, n = 1024, ld = 3072 }, { R = 9, n = 515, ld = 600 }]
grid  = "cdiv(R, 8)"
block = ["32", "8"]
*/
__global__ void rms_slice(float* y, const float* x, const float* w, int R, int n, int ld) {
  const int r = blockIdx.x * 8 + threadIdx.y;
  if (r >= R) return;
  const float* xr = x + (size_t)r * ld;
  float ss = 0.f;
  for (int i = threadIdx.x; i < n; i += 32) ss += xr[i] * xr[i];
  for (int o = 16; o; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  const float inv = rsqrtf(ss / n + 1e-6f);
  for (int i = threadIdx.x; i < n; i += 32) y[(size_t)r * n + i] = xr[i] * inv * w[i];
}

void rms_slice_launch(float* y, const float* x, const float* w, int R, int n, int ld, cudaStream_t stream) {
  rms_slice<<<(R + 7) / 8, dim3(32, 8), 0, stream>>>(y, x, w, R, n, ld);
}
