// Bias + residual add + RMSNorm in fp32 (a TensorRT-LLM-style fp32 residual stream after a projection with a bias),
// one warp per row (4 rows a block, shuffles only, no barrier), the normalized row to a buffer of its own: residual
// += x + bias (bias not nullable: never checked), out = residual * rsqrt(mean(residual^2) + eps) * gamma, eps an
// argument, the output first and gamma before the bias in the argument list.
#include <cuda_runtime.h>
/* kerntune:
args  = ["out: out f32[rows * cols]", "residual: inout f32[rows * cols]", "x: in f32[rows * cols]",
         "gamma: in f32[cols]", "bias: in f32[cols]", "eps: f32 = 1e-6", "rows: i32 = rows", "cols: i32 = cols"]
sizes = [{ rows = 512, cols = 4096 }, { rows = 13, cols = 2050 }]
grid  = "(rows + 3) / 4"
block = ["32", "4"]
*/
__global__ void add_bias_residual_rms_warp(float* __restrict__ out, float* __restrict__ residual,
                                           const float* __restrict__ x, const float* __restrict__ gamma,
                                           const float* __restrict__ bias, float eps, int rows, int cols) {
  const int row = blockIdx.x * 4 + threadIdx.y;
  if (row >= rows) return;
  float* r = residual + (size_t)row * cols;
  const float* xr = x + (size_t)row * cols;
  float ss = 0.f;
  for (int c = threadIdx.x; c < cols; c += 32) {
    const float z = xr[c] + r[c] + bias[c];
    r[c] = z;
    ss += z * z;
  }
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  const float inv = rsqrtf(ss / cols + eps);
  float* y = out + (size_t)row * cols;
  for (int c = threadIdx.x; c < cols; c += 32) y[c] = r[c] * inv * gamma[c];
}

void add_bias_residual_rms_warp_launch(float* out, float* residual, const float* x, const float* gamma,
                                       const float* bias, float eps, int rows, int cols, cudaStream_t st) {
  add_bias_residual_rms_warp<<<(rows + 3) / 4, dim3(32, 4), 0, st>>>(out, residual, x, gamma, bias, eps, rows, cols);
}
