// Fused residual add + RMSNorm whose output is quantized to fp8 e4m3 by a static per-tensor scale on the device
// (TensorRT-LLM / vLLM style "norm + quant" before an fp8 GEMM), fp16, a warp per row (4 rows a block, shuffles
// only), the residual first and the row count last, eps a literal. The normalized value stays in fp32 (the weight
// converted to float, nothing rounded to fp16 after the sum), is divided by the scale for every element, clamped
// and converted with __nv_cvt_float_to_fp8 (saturating), stored as bytes.
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>
/* kerntune:
args  = ["res: inout f16[R * D]", "h: in f16[R * D]", "g: in f16[D]", "qscale: in f32[1] ~ uniform(0.5, 2)",
         "q: out u8[R * D]", "D: i32 = D", "R: i32 = R"]
sizes = [{ R = 256, D = 4096 }, { R = 13, D = 1030 }]
grid  = "(R + 3) / 4"
block = ["32", "4"]
atol  = 1
*/
__global__ void add_norm_fp8(__half* res, const __half* h, const __half* g, const float* qscale, uint8_t* q, int D,
                             int R) {
  const int row = blockIdx.x * 4 + threadIdx.y;
  if (row >= R) return;  // a warp per row: no block-wide barrier
  __half* r = res + (size_t)row * D;
  const __half* x = h + (size_t)row * D;
  float ss = 0.f;
  for (int i = threadIdx.x; i < D; i += 32) {
    const __half z = __float2half(__half2float(x[i]) + __half2float(r[i]));
    r[i] = z;
    const float zf = __half2float(z);
    ss += zf * zf;
  }
  for (int o = 16; o; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  const float rstd = rsqrtf(ss / D + 1e-5f);
  const float s = *qscale;
  for (int i = threadIdx.x; i < D; i += 32) {
    const float y = __half2float(r[i]) * rstd * __half2float(g[i]);
    q[(size_t)row * D + i] =
        (uint8_t)__nv_cvt_float_to_fp8(fminf(fmaxf(y / s, -448.f), 448.f), __NV_SATFINITE, __NV_E4M3);
  }
}

void add_norm_fp8_launch(__half* res, const __half* h, const __half* g, const float* qscale, uint8_t* q, int D, int R,
                         cudaStream_t st) {
  add_norm_fp8<<<(R + 3) / 4, dim3(32, 4), 0, st>>>(res, h, g, qscale, q, D, R);
}
