// Row softmax (fp32) as first written: one row per block of 256 threads, three passes over global memory
// (max, sum of exponentials, normalize), shared-memory tree reductions, expf.

/* kerntune:
args  = ["out: out f32[rows * cols]", "x: in f32[rows * cols]", "cols: i32 = cols"]
sizes = [{ rows = 4096, cols = 4096 }, { rows = 2048, cols = 14336 }, { rows = 64, cols = 8192 },
         { rows = 1000, cols = 5003 }]
grid  = "rows"
block = "256"
*/
__global__ void softmax_kernel(float* out, const float* x, int cols) {
  __shared__ float red[256];
  const float* xr = x + (long long)blockIdx.x * cols;
  float* yr = out + (long long)blockIdx.x * cols;
  float m = -INFINITY;
  for (int i = threadIdx.x; i < cols; i += 256) m = fmaxf(m, xr[i]);
  red[threadIdx.x] = m;
  __syncthreads();
  for (int k = 128; k > 0; k >>= 1) {
    if (threadIdx.x < k) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + k]);
    __syncthreads();
  }
  const float mx = red[0];
  __syncthreads();
  float s = 0.f;
  for (int i = threadIdx.x; i < cols; i += 256) s += expf(xr[i] - mx);
  red[threadIdx.x] = s;
  __syncthreads();
  for (int k = 128; k > 0; k >>= 1) {
    if (threadIdx.x < k) red[threadIdx.x] += red[threadIdx.x + k];
    __syncthreads();
  }
  const float sum = red[0];
  for (int i = threadIdx.x; i < cols; i += 256) yr[i] = expf(xr[i] - mx) / sum;
}

void softmax(float* out, const float* x, int rows, int cols, cudaStream_t stream) {
  softmax_kernel<<<rows, 256, 0, stream>>>(out, x, cols);
}
