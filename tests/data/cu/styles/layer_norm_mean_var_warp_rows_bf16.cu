// LayerNorm storing each row's mean and VARIANCE (not the reciprocal standard deviation), in another style than
// PaddlePaddle's: bf16 rows with bf16 gamma and beta, a warp per row and 4 rows per 128-thread block, the row count
// an argument, the variance in two passes (the squares of the row less its mean), both statistics written by lane 0
// before the reciprocal is taken; outputs first: (y, mean, var, x, gamma, beta, rows, n, eps). One rounding, at the
// store: y = bf16((x - mean) * rsqrt(var + eps) * gamma + beta).
#include <cuda_bf16.h>
/* kerntune:
args  = ["y: out bf16[rows * n]", "mean_out: out f32[rows]", "var_out: out f32[rows]", "x: in bf16[rows * n]",
         "gamma: in bf16[n]", "beta: in bf16[n]", "rows: i32 = rows", "n: i32 = n", "eps: f32 = 1e-5"]
sizes = [{ rows = 256, n = 1024 }, { rows = 9, n = 770 }]
grid  = "(rows + 3) / 4"
block = "128"
*/
__global__ void layer_norm_mean_var_warp(__nv_bfloat16* __restrict__ y, float* __restrict__ mean_out,
                                         float* __restrict__ var_out, const __nv_bfloat16* __restrict__ x,
                                         const __nv_bfloat16* __restrict__ gamma,
                                         const __nv_bfloat16* __restrict__ beta, int rows, int n, float eps) {
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * 4 + (threadIdx.x >> 5);
  if (row >= rows) return;
  const __nv_bfloat16* xr = x + (size_t)row * n;
  float s = 0.f;
  for (int i = lane; i < n; i += 32) s += __bfloat162float(xr[i]);
  for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  const float mu = s / (float)n;
  float sq = 0.f;
  for (int i = lane; i < n; i += 32) {
    const float d = __bfloat162float(xr[i]) - mu;
    sq += d * d;
  }
  for (int o = 16; o; o >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, o);
  const float variance = sq / (float)n;
  if (lane == 0) {
    mean_out[row] = mu;
    var_out[row] = variance;
  }
  const float inv = rsqrtf(variance + eps);
  for (int i = lane; i < n; i += 32) {
    const float v = (__bfloat162float(xr[i]) - mu) * inv;
    y[(size_t)row * n + i] = __float2bfloat16(v * __bfloat162float(gamma[i]) + __bfloat162float(beta[i]));
  }
}

void layer_norm_mean_var_launch(__nv_bfloat16* y, float* mean_out, float* var_out, const __nv_bfloat16* x,
                                const __nv_bfloat16* gamma, const __nv_bfloat16* beta, int rows, int n, float eps,
                                cudaStream_t st) {
  layer_norm_mean_var_warp<<<(rows + 3) / 4, 128, 0, st>>>(y, mean_out, var_out, x, gamma, beta, rows, n, eps);
}
