// RMSNorm of an fp32 residual stream into bf16 activations for the next GEMM (ONNX Runtime's SimplifiedLayerNorm
// instantiated <float, float, BFloat16>-style, Transformer Engine's itype float / otype bf16): an fp32 weight, a
// warp per row with 8 rows per block on threadIdx.y, the row count an argument, the math in fp32 and one rounding
// to bf16 at the store. Arguments (out, x, weight, rows, cols, eps).
#include <cuda_bf16.h>
/* kerntune:
args  = ["out: out bf16[rows * cols]", "x: in f32[rows * cols]", "weight: in f32[cols]", "rows: i32 = rows",
         "cols: i32 = cols", "eps: f32 = 1e-6"]
sizes = [{ rows = 512, cols = 4096 }, { rows = 9, cols = 1003 }]
grid  = "cdiv(rows, 8)"
block = [32, 8]
*/
__global__ void rms_to_bf16(__nv_bfloat16* __restrict__ out, const float* __restrict__ x,
                            const float* __restrict__ weight, int rows, int cols, float eps) {
  const int r = blockIdx.x * blockDim.y + threadIdx.y;
  if (r >= rows) return;
  const float* xr = x + (long long)r * cols;
  float ss = 0.f;
  for (int c = threadIdx.x; c < cols; c += 32) ss = fmaf(xr[c], xr[c], ss);
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, m);
  const float rs = rsqrtf(ss / (float)cols + eps);
  for (int c = threadIdx.x; c < cols; c += 32)
    out[(long long)r * cols + c] = __float2bfloat16(xr[c] * rs * weight[c]);
}

void rms_to_bf16_launch(__nv_bfloat16* out, const float* x, const float* weight, int rows, int cols, float eps,
                        cudaStream_t stream) {
  rms_to_bf16<<<(rows + 7) / 8, dim3(32, 8), 0, stream>>>(out, x, weight, rows, cols, eps);
}
