// Fused add + RMSNorm as a torch reference port writes it (x.float() + residual.float(), the residual stored back
// rounded, the norm of the fp32 sum): fp16, the residual updated in place, the normalized row into out. A warp a
// row, 4 rows a block, each lane keeping its 16 sums in fp32 registers (rows of 512).
#include <cuda_fp16.h>

/* kerntune:
args  = ["out: out f16[rows * 512]", "x: in f16[rows * 512]", "residual: inout f16[rows * 512]", "w: in f16[512]",
         "rows: i32 = rows", "eps: f32 = 1e-6"]
sizes = [{ rows = 65536 }, { rows = 7 }]
grid  = "cdiv(rows, 4)"
block = ["32", "4"]
*/
__global__ void add_rmsnorm_ref(__half* __restrict__ out, const __half* __restrict__ x, __half* __restrict__ residual,
                                const __half* __restrict__ w, int rows, float eps) {
  const int row = blockIdx.x * 4 + threadIdx.y;
  if (row >= rows) return;
  const size_t base = (size_t)row * 512;
  float v[16];
  float ss = 0.f;
  for (int j = 0; j < 16; ++j) {
    const int c = j * 32 + threadIdx.x;
    const float xf = __half2float(x[base + c]);
    const float rf = __half2float(residual[base + c]);
    v[j] = xf + rf;
    residual[base + c] = __float2half(v[j]);
    ss += v[j] * v[j];
  }
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  const float inv = rsqrtf(ss / 512.f + eps);
  for (int j = 0; j < 16; ++j) {
    const int c = j * 32 + threadIdx.x;
    out[base + c] = __float2half(v[j] * inv * __half2float(w[c]));
  }
}

void add_rmsnorm(__half* out, const __half* x, __half* residual, const __half* w, int rows, float eps,
                 cudaStream_t stream) {
  add_rmsnorm_ref<<<(rows + 3) / 4, dim3(32, 4), 0, stream>>>(out, x, residual, w, rows, eps);
}
