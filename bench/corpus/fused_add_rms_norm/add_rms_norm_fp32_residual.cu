// Residual add + RMSNorm with an fp32 residual stream (as in inference stacks that keep the residual in fp32,
// e.g. Megatron's fp32_residual_connection): residual (fp32) += hidden (bf16) in place, and the normalized row goes
// to a separate bf16 output. A persistent grid-stride loop over tokens with grid = min(tokens, 4096), 512 threads
// given by a #define, a shared-memory tree reduction, the second pass re-reading the fp32 residual.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <algorithm>

#define THREADS_PER_BLOCK 512
static const int kMaxGrid = 4096;

/* kerntune:
args  = ["normed: out bf16[tokens * hidden_dim]", "residual: inout f32[tokens * hidden_dim]",
         "hidden: in bf16[tokens * hidden_dim]", "gamma: in bf16[hidden_dim]", "tokens: i32 = tokens",
         "hidden_dim: i32 = hidden_dim", "eps: f32 = 1e-5"]
sizes = [{ tokens = 8192, hidden_dim = 4096 }, { tokens = 16, hidden_dim = 14336 }, { tokens = 4097, hidden_dim = 2053 }]
grid  = "min(tokens, 4096)"
block = "512"
*/
__global__ void add_residual_rmsnorm_kernel(__nv_bfloat16* __restrict__ normed, float* __restrict__ residual,
                                            const __nv_bfloat16* __restrict__ hidden,
                                            const __nv_bfloat16* __restrict__ gamma, int tokens, int hidden_dim,
                                            float eps) {
  __shared__ float red[THREADS_PER_BLOCK];
  const int tid = threadIdx.x;
  for (int t = blockIdx.x; t < tokens; t += gridDim.x) {
    float* r = residual + (size_t)t * hidden_dim;
    const __nv_bfloat16* h = hidden + (size_t)t * hidden_dim;
    __nv_bfloat16* o = normed + (size_t)t * hidden_dim;
    float ss = 0.f;
    for (int i = tid; i < hidden_dim; i += THREADS_PER_BLOCK) {
      const float v = r[i] + __bfloat162float(h[i]);
      r[i] = v;
      ss += v * v;
    }
    red[tid] = ss;
    __syncthreads();
    for (int s = THREADS_PER_BLOCK / 2; s > 0; s >>= 1) {
      if (tid < s) red[tid] += red[tid + s];
      __syncthreads();
    }
    const float rstd = rsqrtf(red[0] / hidden_dim + eps);
    __syncthreads();  // red[0] is read by all before the next token reuses red
    for (int i = tid; i < hidden_dim; i += THREADS_PER_BLOCK) {
      o[i] = __float2bfloat16(r[i] * rstd * __bfloat162float(gamma[i]));
    }
  }
}

void add_residual_rmsnorm(__nv_bfloat16* normed, float* residual, const __nv_bfloat16* hidden,
                          const __nv_bfloat16* gamma, int tokens, int hidden_dim, float eps, cudaStream_t stream) {
  const int grid = std::min(tokens, kMaxGrid);
  add_residual_rmsnorm_kernel<<<grid, THREADS_PER_BLOCK, 0, stream>>>(normed, residual, hidden, gamma, tokens,
                                                                       hidden_dim, eps);
}
