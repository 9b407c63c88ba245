// LayerNorm forward with a run-time zero-centered gamma and the statistics the backward pass needs, in the manner of
// Transformer Engine's layernorm (outputs first: z, mu, rsigma; then x, gamma, beta, sizes, epsilon, the flag): bf16
// rows with fp32 gamma and beta, one row per 256-thread block (the row count is the grid), warp shuffles then the
// warps' partials through shared memory, the variance in two passes; the flag a bool argument under which gamma
// gets 1 added (in fp32, braces and `g = g + 1.f`). z = bf16(g * ((x - mu) * rs) + b): one rounding, at the store.
#include <cuda_bf16.h>
__device__ __forceinline__ float block_sum_256(float v, float* sh) {
  for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
  __syncthreads();
  float t = 0.f;
  for (int w = 0; w < 8; ++w) t += sh[w];
  __syncthreads();
  return t;
}

/* kerntune:
args  = ["z: out bf16[rows * cols]", "mu: out f32[rows]", "rsigma: out f32[rows]", "x: in bf16[rows * cols]",
         "gamma: in f32[cols]", "beta: in f32[cols]", "cols: i32 = cols", "epsilon: f32 = 1e-5",
         "zero_centered_gamma: u8 = 1"]
sizes = [{ rows = 128, cols = 4096 }, { rows = 5, cols = 1000 }]
grid  = "rows"
block = "256"
*/
__global__ void ln_fwd_zero_centered(__nv_bfloat16* __restrict__ z, float* __restrict__ mu,
                                     float* __restrict__ rsigma, const __nv_bfloat16* __restrict__ x,
                                     const float* __restrict__ gamma, const float* __restrict__ beta, int cols,
                                     float epsilon, bool zero_centered_gamma) {
  __shared__ float sh[8];
  const __nv_bfloat16* xr = x + (size_t)blockIdx.x * cols;
  float s = 0.f;
  for (int c = threadIdx.x; c < cols; c += 256) s += __bfloat162float(xr[c]);
  const float m = block_sum_256(s, sh) / (float)cols;
  float q = 0.f;
  for (int c = threadIdx.x; c < cols; c += 256) {
    const float d = __bfloat162float(xr[c]) - m;
    q += d * d;
  }
  const float rs = rsqrtf(block_sum_256(q, sh) / (float)cols + epsilon);
  if (threadIdx.x == 0) {
    mu[blockIdx.x] = m;
    rsigma[blockIdx.x] = rs;
  }
  for (int c = threadIdx.x; c < cols; c += 256) {
    const float y = (__bfloat162float(xr[c]) - m) * rs;
    float g = gamma[c];
    if (zero_centered_gamma) {
      g = g + 1.f;
    }
    z[(size_t)blockIdx.x * cols + c] = __float2bfloat16(g * y + beta[c]);
  }
}

void ln_fwd_zero_centered_launch(__nv_bfloat16* z, float* mu, float* rsigma, const __nv_bfloat16* x,
                                 const float* gamma, const float* beta, int rows, int cols, float epsilon,
                                 bool zero_centered_gamma, cudaStream_t st) {
  ln_fwd_zero_centered<<<rows, 256, 0, st>>>(z, mu, rsigma, x, gamma, beta, cols, epsilon, zero_centered_gamma);
}
