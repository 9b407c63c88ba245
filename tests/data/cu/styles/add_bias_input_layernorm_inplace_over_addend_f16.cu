// FasterTransformer-style add_bias_input_layernorm, fp16: the attention output projection arrives in `out` and the
// block's input (the residual) in `input`; out = LayerNorm(out + input + bias) written over `out`, the sum stored
// nowhere else. One token per block of 256 threads striding the row, the sum (fp32, each add in fp32 from the
// halves) kept in registers of at most 8 per thread, mean and variance by two shared-memory trees, eps an argument
// inside the root, gamma and beta fp16, one rounding at the store.
#include <cuda_runtime.h>
#include <cuda_fp16.h>

/* kerntune:
args  = ["out: inout f16[m * n]", "input: in f16[m * n]", "bias: in f16[n]", "gamma: in f16[n]", "beta: in f16[n]",
         "m: i32 = m", "n: i32 = n", "eps: f32 = 1e-5"]
sizes = [{ m = 512, n = 2048 }, { m = 7, n = 1000 }]
grid  = "m"
block = "256"
*/
__global__ void add_bias_input_layernorm(__half* out, const __half* __restrict__ input, const __half* __restrict__ bias,
                                         const __half* __restrict__ gamma, const __half* __restrict__ beta, int m,
                                         int n, float eps) {
  __shared__ float red[256];
  __shared__ float s_mean, s_rstd;
  __half* row = out + (size_t)blockIdx.x * n;
  const __half* res = input + (size_t)blockIdx.x * n;
  float v[8];
  float sum = 0.f;
  for (int k = 0; k < 8; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    v[k] = i < n ? __half2float(row[i]) + __half2float(res[i]) + __half2float(bias[i]) : 0.f;
    sum += v[k];
  }
  red[threadIdx.x] = sum;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) s_mean = red[0] / n;
  __syncthreads();
  float var = 0.f;
  for (int k = 0; k < 8; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    const float d = i < n ? v[k] - s_mean : 0.f;
    var += d * d;
  }
  red[threadIdx.x] = var;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) s_rstd = rsqrtf(red[0] / n + eps);
  __syncthreads();
  for (int k = 0; k < 8; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    if (i < n) row[i] = __float2half((v[k] - s_mean) * s_rstd * __half2float(gamma[i]) + __half2float(beta[i]));
  }
}
