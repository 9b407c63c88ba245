// RMSNorm added into the output it writes (ExLlamaV2's rms_norm with add_residual: y += norm(x) * w, the residual
// stream updated in place by a post-norm): fp16, the row read as half2 pairs by a warp per row, 4 rows per block
// on threadIdx.y, the row count an argument. The weighted value is computed in fp32 (x * w * rms), rounded to
// fp16, then added to y's element in fp16 (__hadd2: one more rounding). Arguments (x, w, y, rows, dim, eps); dim even.
#include <cuda_fp16.h>
/* kerntune:
args  = ["x: in f16[rows * dim]", "w: in f16[dim]", "y: inout f16[rows * dim]", "rows: i32 = rows",
         "dim: i32 = dim", "eps: f32 = 1e-6"]
sizes = [{ rows = 256, dim = 4096 }, { rows = 7, dim = 1002 }]
grid  = "cdiv(rows, 4)"
block = [32, 4]
*/
__global__ void rms_accumulate(const __half* __restrict__ x, const __half* __restrict__ w, __half* y, int rows,
                               int dim, float eps) {
  const int row = blockIdx.x * 4 + threadIdx.y;
  if (row >= rows) return;
  const __half2* xr = reinterpret_cast<const __half2*>(x + (size_t)row * dim);
  const __half2* w2 = reinterpret_cast<const __half2*>(w);
  __half2* yr = reinterpret_cast<__half2*>(y + (size_t)row * dim);
  const int pairs = dim / 2;
  float sum = 0.f;
  for (int c = threadIdx.x; c < pairs; c += 32) {
    const float2 f = __half22float2(xr[c]);
    sum += f.x * f.x + f.y * f.y;
  }
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  const float rms = rsqrtf(sum / dim + eps);
  for (int c = threadIdx.x; c < pairs; c += 32) {
    const float2 f = __half22float2(xr[c]);
    const float2 g = __half22float2(w2[c]);
    const __half2 n = __floats2half2_rn(f.x * g.x * rms, f.y * g.y * rms);
    yr[c] = __hadd2(yr[c], n);
  }
}

void rms_accumulate_launch(const __half* x, const __half* w, __half* y, int rows, int dim, float eps,
                           cudaStream_t stream) {
  rms_accumulate<<<(rows + 3) / 4, dim3(32, 4), 0, stream>>>(x, w, y, rows, dim, eps);
}
