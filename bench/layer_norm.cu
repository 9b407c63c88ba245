// LayerNorm (fp32) as first written: one row per block of 512 threads, three passes over the row in global memory
// (mean, variance, normalize), two shared-memory tree reductions.

#define LN_THREADS 512

/* kerntune:
args  = ["out: out f32[tokens * hidden]", "x: in f32[tokens * hidden]", "gamma: in f32[hidden]",
         "beta: in f32[hidden]", "eps: f32 = 1e-5", "hidden: i32 = hidden"]
sizes = [{ tokens = 4096, hidden = 4096 }, { tokens = 4096, hidden = 8192 }, { tokens = 32, hidden = 12288 },
         { tokens = 1000, hidden = 4097 }]
grid  = "tokens"
block = "512"
*/
__global__ void layer_norm_kernel(float* out, const float* x, const float* gamma, const float* beta, float eps,
                                  int hidden) {
  __shared__ float red[LN_THREADS];
  const float* xr = x + (long long)blockIdx.x * hidden;
  float* yr = out + (long long)blockIdx.x * hidden;
  float s = 0.f;
  for (int i = threadIdx.x; i < hidden; i += LN_THREADS) s += xr[i];
  red[threadIdx.x] = s;
  __syncthreads();
  for (int k = LN_THREADS / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) red[threadIdx.x] += red[threadIdx.x + k];
    __syncthreads();
  }
  const float mean = red[0] / (float)hidden;
  __syncthreads();
  float q = 0.f;
  for (int i = threadIdx.x; i < hidden; i += LN_THREADS) {
    const float d = xr[i] - mean;
    q += d * d;
  }
  red[threadIdx.x] = q;
  __syncthreads();
  for (int k = LN_THREADS / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) red[threadIdx.x] += red[threadIdx.x + k];
    __syncthreads();
  }
  const float inv = rsqrtf(red[0] / (float)hidden + eps);
  for (int i = threadIdx.x; i < hidden; i += LN_THREADS) yr[i] = (xr[i] - mean) * inv * gamma[i] + beta[i];
}

void layer_norm(float* out, const float* x, const float* gamma, const float* beta, float eps, int tokens, int hidden,
                cudaStream_t stream) {
  layer_norm_kernel<<<tokens, LN_THREADS, 0, stream>>>(out, x, gamma, beta, eps, hidden);
}
