// Bias + residual add + LayerNorm in fp16, normalized in place over the hidden states (the residual stream updated
// with the sum, the hidden states overwritten by its LayerNorm), each add an fp16 __hadd (rounded twice:
// (hidden + residual) then + bias), bias not nullable, eps an argument, one block of 256 per token with a
// shared-memory tree for the mean and the centred variance of the rounded sum re-read from the residual.
#include <cuda_fp16.h>
/* kerntune:
args  = ["hidden: inout f16[tokens * dim]", "resid: inout f16[tokens * dim]", "bias: in f16[dim]",
         "gamma: in f16[dim]", "beta: in f16[dim]", "eps: f32 = 1e-5", "tokens: i32 = tokens", "dim: i32 = dim"]
sizes = [{ tokens = 256, dim = 2048 }, { tokens = 5, dim = 1030 }]
grid  = "tokens"
block = "256"
*/
__global__ void add_bias_residual_ln_inplace(__half* hidden, __half* resid, const __half* bias, const __half* gamma,
                                             const __half* beta, float eps, int tokens, int dim) {
  __shared__ float red[256];
  __half* h = hidden + (size_t)blockIdx.x * dim;
  __half* r = resid + (size_t)blockIdx.x * dim;
  float s = 0.f;
  for (int i = threadIdx.x; i < dim; i += 256) {
    const __half z = __hadd(__hadd(h[i], r[i]), bias[i]);
    r[i] = z;
    s += __half2float(z);
  }
  red[threadIdx.x] = s;
  __syncthreads();
  for (int o = 128; o; o >>= 1) {
    if (threadIdx.x < o) red[threadIdx.x] += red[threadIdx.x + o];
    __syncthreads();
  }
  const float mean = red[0] / dim;
  __syncthreads();
  float q = 0.f;
  for (int i = threadIdx.x; i < dim; i += 256) {
    const float d = __half2float(r[i]) - mean;
    q += d * d;
  }
  red[threadIdx.x] = q;
  __syncthreads();
  for (int o = 128; o; o >>= 1) {
    if (threadIdx.x < o) red[threadIdx.x] += red[threadIdx.x + o];
    __syncthreads();
  }
  const float rstd = rsqrtf(red[0] / dim + eps);
  for (int i = threadIdx.x; i < dim; i += 256)
    h[i] = __float2half((__half2float(r[i]) - mean) * rstd * __half2float(gamma[i]) + __half2float(beta[i]));
}

void add_bias_residual_ln_inplace_launch(__half* hidden, __half* resid, const __half* bias, const __half* gamma,
                                         const __half* beta, float eps, int tokens, int dim, cudaStream_t st) {
  add_bias_residual_ln_inplace<<<tokens, 256, 0, st>>>(hidden, resid, bias, gamma, beta, eps, tokens, dim);
}
