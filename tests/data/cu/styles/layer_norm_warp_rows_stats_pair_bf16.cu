// Style kernel: LayerNorm over bf16 rows, a warp a row (8 rows a 256-thread block), gamma and beta fp32, the row's
// mean and 1 / sqrt(var + eps) saved for the backward pass as one fp32 array of a (mean, rstd) pair a row.
#include <cuda_bf16.h>

/* kerntune:
args  = ["y: out bf16[rows * cols]", "stats: out f32[rows * 2]", "x: in bf16[rows * cols]", "gamma: in f32[cols]",
         "beta: in f32[cols]", "rows: i32 = rows", "cols: i32 = cols", "eps: f32 = 1e-6"]
sizes = [{ rows = 8192, cols = 4096 }, { rows = 5, cols = 2048 }, { rows = 333, cols = 1111 }]
grid  = "cdiv(rows, 8)"
block = 256
*/
__global__ void ln_warp_rows_stats_pair(__nv_bfloat16* y, float* stats, const __nv_bfloat16* x, const float* gamma,
                                        const float* beta, int rows, int cols, float eps) {
  const int row = blockIdx.x * 8 + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= rows) return;
  const __nv_bfloat16* xr = x + (long long)row * cols;
  float s = 0.f;
  for (int c = lane; c < cols; c += 32) s += __bfloat162float(xr[c]);
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  const float mean = s / cols;
  float q = 0.f;
  for (int c = lane; c < cols; c += 32) {
    const float d = __bfloat162float(xr[c]) - mean;
    q += d * d;
  }
  for (int o = 16; o > 0; o >>= 1) q += __shfl_xor_sync(0xffffffffu, q, o);
  const float rstd = rsqrtf(q / cols + eps);
  for (int c = lane; c < cols; c += 32)
    y[(long long)row * cols + c] = __float2bfloat16((__bfloat162float(xr[c]) - mean) * rstd * gamma[c] + beta[c]);
  if (lane == 0) {
    stats[2 * row] = mean;
    stats[2 * row + 1] = rstd;
  }
}

void ln_forward(__nv_bfloat16* y, float* stats, const __nv_bfloat16* x, const float* gamma, const float* beta, int rows,
                int cols, cudaStream_t stream) {
  ln_warp_rows_stats_pair<<<(rows + 7) / 8, 256, 0, stream>>>(y, stats, x, gamma, beta, rows, cols, 1e-6f);
}
