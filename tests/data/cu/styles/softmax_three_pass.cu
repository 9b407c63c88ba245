// softmax over rows fp32, three passes, #define THREADS 128, a row-count argument, no fmaxf (a comparison)
#define THREADS 128
/* kerntune:
args  = ["in: in f32[R * N]", "out: out f32[R * N]", "R: i32 = R", "N: i32 = N"]
sizes = [{ R = 1024, N = 1024 }, { R = 100, N = 1003 }]
grid  = "R"
block = "THREADS"
*/
__global__ void softmax3(const float* in, float* out, int R, int N) {
  __shared__ float buf[THREADS];
  const float* x = in + (size_t)blockIdx.x * N;
  float m = -1e30f;
  for (int i = threadIdx.x; i < N; i += THREADS) if (x[i] > m) m = x[i];
  buf[threadIdx.x] = m;
  __syncthreads();
  for (int s = THREADS / 2; s > 0; s >>= 1) { if (threadIdx.x < s && buf[threadIdx.x + s] > buf[threadIdx.x]) buf[threadIdx.x] = buf[threadIdx.x + s]; __syncthreads(); }
  m = buf[0];
  __syncthreads();
  float sum = 0.f;
  for (int i = threadIdx.x; i < N; i += THREADS) sum += exp(x[i] - m);
  buf[threadIdx.x] = sum;
  __syncthreads();
  for (int s = THREADS / 2; s > 0; s >>= 1) { if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s]; __syncthreads(); }
  sum = buf[0];
  for (int i = threadIdx.x; i < N; i += THREADS) out[(size_t)blockIdx.x * N + i] = exp(x[i] - m) / sum;
}

void launch_softmax(const float* in, float* out, int R, int N, cudaStream_t stream) {
  softmax3<<<R, THREADS, 0, stream>>>(in, out, R, N);
}
