// fused add + RMSNorm with an fp32 residual stream, fp16 activations normalized in place: one warp per token,
// eps outside the root, the weight (fp32) applied in fp32 with one rounding
#include <cuda_fp16.h>
/* kerntune:
args  = ["x: inout f16[rows * d]", "res: inout f32[rows * d]", "w: in f32[d]", "rows: i32 = rows", "d: i32 = d", "eps: f32 = 1e-6"]
sizes = [{ rows = 512, d = 2048 }, { rows = 3, d = 130 }]
grid  = "cdiv(rows, 4)"
block = "128"
*/
__global__ void add_rms_fp32_res(__half* x, float* res, const float* w, int rows, int d, float eps) {
  const int row = blockIdx.x * 4 + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= rows) return;
  __half* xr = x + (size_t)row * d;
  float* rr = res + (size_t)row * d;
  float ss = 0.f;
  for (int i = lane; i < d; i += 32) {
    const float z = rr[i] + __half2float(xr[i]);
    rr[i] = z;
    ss += z * z;
  }
  for (int o = 16; o; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  const float inv = 1.f / (sqrtf(ss / d) + eps);
  for (int i = lane; i < d; i += 32) xr[i] = __float2half(rr[i] * inv * w[i]);
}

void add_rms_fp32_res_launch(__half* x, float* res, const float* w, int rows, int d, float eps, cudaStream_t st) {
  add_rms_fp32_res<<<(rows + 3) / 4, 128, 0, st>>>(x, res, w, rows, d, eps);
}
