// LayerNorm as CTranslate2 ports PyTorch's: the row length first, then eps, (N, eps, X, gamma, beta, Y); one pass of
// sums and sums of squares, both reduced in shared memory, the mean and the variance as products with 1 / N, the
// variance clamped at 0 (E[x^2] - mean^2); nullable gamma and beta; one row per 512-thread block, no row count.
#include <cuda_bf16.h>
/* kerntune:
args  = ["N: i32 = N", "eps: f32 = 1e-5", "X: in bf16[M * N]", "gamma: in bf16[N]", "beta: in bf16[N]",
         "Y: out bf16[M * N]"]
sizes = [{ M = 64, N = 4096 }, { M = 5, N = 1030 }]
grid  = "M"
block = "512"
*/
__global__ void ln_forward(int N, float eps, const __nv_bfloat16* X, const __nv_bfloat16* gamma,
                           const __nv_bfloat16* beta, __nv_bfloat16* Y) {
  __shared__ float r1[512], r2[512];
  __shared__ float s_mean, s_rstd;
  const long long base = (long long)blockIdx.x * N;
  float sum1 = 0.f, sum2 = 0.f;
  for (int j = threadIdx.x; j < N; j += blockDim.x) {
    const float v = __bfloat162float(X[base + j]);
    sum1 += v;
    sum2 += v * v;
  }
  r1[threadIdx.x] = sum1;
  r2[threadIdx.x] = sum2;
  __syncthreads();
  for (int o = 256; o > 0; o >>= 1) {
    if (threadIdx.x < o) {
      r1[threadIdx.x] += r1[threadIdx.x + o];
      r2[threadIdx.x] += r2[threadIdx.x + o];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const float scale = 1.f / (float)N;
    const float mean = r1[0] * scale;
    s_mean = mean;
    s_rstd = rsqrtf(fmaxf(r2[0] * scale - mean * mean, 0.f) + eps);
  }
  __syncthreads();
  for (int j = threadIdx.x; j < N; j += blockDim.x) {
    const float g = gamma == nullptr ? 1.f : __bfloat162float(gamma[j]);
    const float b = beta == nullptr ? 0.f : __bfloat162float(beta[j]);
    Y[base + j] = __float2bfloat16((__bfloat162float(X[base + j]) - s_mean) * s_rstd * g + b);
  }
}

void ln_forward_launch(int M, int N, float eps, const __nv_bfloat16* X, const __nv_bfloat16* gamma,
                       const __nv_bfloat16* beta, __nv_bfloat16* Y, cudaStream_t stream) {
  ln_forward<<<M, 512, 0, stream>>>(N, eps, X, gamma, beta, Y);
}
