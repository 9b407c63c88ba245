// RMSNorm fused with dynamic per-token fp8 quantization in another style than vLLM's (SGLang / TensorRT-LLM-like
// per-token activation quant in front of an FP8 GEMM): fp16 rows, a warp per row and 8 rows per 256-thread block,
// warp-shuffle sum and max, the weighted row kept in fp32 (the weight converted to float, nothing rounded to fp16),
// the floor on the absolute maximum before the division by 448 (max(amax, 1e-10) / 448), the row multiplied by the
// scale's reciprocal taken once, no upper bound; e4m3 bytes by __nv_cvt_float_to_fp8, the scales fp32 one per row
// written by lane 0, the row count an argument.
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>
/* kerntune:
args  = ["q: out u8[R * D]", "x: in f16[R * D]", "g: in f16[D]", "rs: out f32[R]", "R: i32 = R", "D: i32 = D",
         "eps: f32 = 1e-5"]
sizes = [{ R = 100, D = 4096 }, { R = 9, D = 1000 }]
grid  = "(R + 7) / 8"
block = "256"
atol  = 1
*/
__global__ void rmsnorm_per_token_fp8(uint8_t* __restrict__ q, const __half* __restrict__ x,
                                      const __half* __restrict__ g, float* __restrict__ rs, int R, int D, float eps) {
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * 8 + (threadIdx.x >> 5);
  if (row >= R) return;
  const __half* xr = x + (size_t)row * D;
  float acc = 0.f;
  for (int i = lane; i < D; i += 32) {
    const float v = __half2float(xr[i]);
    acc += v * v;
  }
  for (int o = 16; o; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  const float r = rsqrtf(acc / (float)D + eps);
  float amax = 0.f;
  for (int i = lane; i < D; i += 32) amax = fmaxf(amax, fabsf(__half2float(xr[i]) * r * __half2float(g[i])));
  for (int o = 16; o; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float scale = fmaxf(amax, 1e-10f) / 448.f;
  const float inv_scale = 1.f / scale;
  if (lane == 0) rs[row] = scale;
  for (int i = lane; i < D; i += 32) {
    const float y = __half2float(xr[i]) * r * __half2float(g[i]);
    q[(size_t)row * D + i] = __nv_cvt_float_to_fp8(fminf(fmaxf(y * inv_scale, -448.f), 448.f), __NV_SATFINITE,
                                                   __NV_E4M3);
  }
}

void rmsnorm_per_token_fp8_launch(uint8_t* q, const __half* x, const __half* g, float* rs, int R, int D, float eps,
                                  cudaStream_t st) {
  rmsnorm_per_token_fp8<<<(R + 7) / 8, 256, 0, st>>>(q, x, g, rs, R, D, eps);
}
