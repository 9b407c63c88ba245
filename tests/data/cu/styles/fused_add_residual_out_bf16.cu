// Fused add + RMSNorm bf16 out of place: residual_out = x + residual (rounded), y = rmsnorm(residual_out) * w;
// the outputs first in the argument list, a shared-memory tree over 256 threads, eps last.
#include <cuda_bf16.h>
/* kerntune:
args  = ["residual_out: out bf16[rows * n]", "y: out bf16[rows * n]", "x: in bf16[rows * n]", "residual: in bf16[rows * n]", "w: in bf16[n]", "rows: i32 = rows", "n: i32 = n", "eps: f32 = 1e-6"]
sizes = [{ rows = 64, n = 2048 }, { rows = 5, n = 1030 }]
grid  = "rows"
block = "256"
*/
__global__ void add_rmsnorm_out(__nv_bfloat16* residual_out, __nv_bfloat16* y, const __nv_bfloat16* x,
                                const __nv_bfloat16* residual, const __nv_bfloat16* w, int rows, int n, float eps) {
  __shared__ float red[256];
  const size_t off = (size_t)blockIdx.x * n;
  float ss = 0.f;
  for (int i = threadIdx.x; i < n; i += 256) {
    const __nv_bfloat16 z = __float2bfloat16(__bfloat162float(x[off + i]) + __bfloat162float(residual[off + i]));
    residual_out[off + i] = z;
    const float f = __bfloat162float(z);
    ss += f * f;
  }
  red[threadIdx.x] = ss;
  __syncthreads();
  for (int s = 128; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  const float inv = rsqrtf(red[0] / n + eps);
  for (int i = threadIdx.x; i < n; i += 256)
    y[off + i] = __float2bfloat16(__bfloat162float(residual_out[off + i]) * inv * __bfloat162float(w[i]));
}

void add_rmsnorm_out_launch(__nv_bfloat16* residual_out, __nv_bfloat16* y, const __nv_bfloat16* x,
                            const __nv_bfloat16* residual, const __nv_bfloat16* w, int rows, int n, float eps,
                            cudaStream_t stream) {
  add_rmsnorm_out<<<rows, 256, 0, stream>>>(residual_out, y, x, residual, w, rows, n, eps);
}
