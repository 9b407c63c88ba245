// RMSNorm with a shift (TensorRT-LLM's generalRmsNorm with its beta: x * rsqrt(mean(x^2) + eps) * gamma + beta),
// fp32: a persistent grid of 128-thread blocks walking the rows, a warp-shuffle reduction with the warps' partials
// in shared memory, every thread taking the reciprocal RMS itself. Arguments (x, gamma, beta, y, n, eps, rows).
/* kerntune:
args  = ["x: in f32[R * n]", "gamma: in f32[n]", "beta: in f32[n]", "y: out f32[R * n]", "n: i32 = n",
         "eps: f32 = 1e-5", "rows: i32 = R"]
sizes = [{ R = 300, n = 2048 }, { R = 6, n = 777 }]
grid  = "min(R, 132)"
block = "128"
*/
__global__ void rms_shift(const float* __restrict__ x, const float* __restrict__ gamma,
                          const float* __restrict__ beta, float* __restrict__ y, int n, float eps, int rows) {
  __shared__ float part[4];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + (long long)r * n;
    float acc = 0.f;
    for (int i = threadIdx.x; i < n; i += 128) acc += xr[i] * xr[i];
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    if (lane == 0) part[warp] = acc;
    __syncthreads();
    const float total = part[0] + part[1] + part[2] + part[3];
    __syncthreads();  // part is reused by the next row
    const float inv = rsqrtf(total / n + eps);
    for (int i = threadIdx.x; i < n; i += 128) y[(long long)r * n + i] = xr[i] * inv * gamma[i] + beta[i];
  }
}

void rms_shift_launch(const float* x, const float* gamma, const float* beta, float* y, int rows, int n, float eps,
                      cudaStream_t stream) {
  rms_shift<<<rows < 132 ? rows : 132, 128, 0, stream>>>(x, gamma, beta, y, n, eps, rows);
}
