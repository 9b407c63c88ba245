// RMSNorm quantized to int8 by a static per-tensor scale (SmoothQuant W8A8, as TensorRT-LLM's generalRmsNorm with
// scale_orig_quant_per_tensor computes it), bf16 in, a bf16 weight: a warp per row, 8 warps per block walking the
// rows grid-stride over a capped grid, the row count an argument. The weighted value is computed in fp32 and
// rounded to bf16 once, then multiplied by the scale read from the device (the quantization multiplier
// 127 / amax) and rounded to the nearest int8, saturated to [-128, 127]. Arguments (x, gamma, scale, q, rows,
// hidden, eps).
#include <cuda_bf16.h>
#include <stdint.h>
/* kerntune:
args  = ["x: in bf16[M * D]", "gamma: in bf16[D]", "scale: in f32[1] ~ uniform(20, 60)", "q: out i8[M * D]",
         "rows: i32 = M", "hidden: i32 = D", "eps: f32 = 1e-6"]
sizes = [{ M = 1024, D = 4096 }, { M = 13, D = 1000 }]
grid  = "min(cdiv(M, 8), 264)"
block = "256"
atol  = 1
*/
__global__ void rms_int8_static(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ gamma,
                                const float* __restrict__ scale, int8_t* __restrict__ q, int rows, int hidden,
                                float eps) {
  const int lane = threadIdx.x & 31;
  const float s = __ldg(scale);
  for (int r = blockIdx.x * 8 + (threadIdx.x >> 5); r < rows; r += gridDim.x * 8) {
    const __nv_bfloat16* xr = x + (size_t)r * hidden;
    float sq = 0.f;
    for (int c = lane; c < hidden; c += 32) {
      const float v = __bfloat162float(xr[c]);
      sq += v * v;
    }
    for (int m = 16; m; m >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, m);
    const float rs = rsqrtf(sq / hidden + eps);
    for (int c = lane; c < hidden; c += 32) {
      const __nv_bfloat16 y = __float2bfloat16(__bfloat162float(xr[c]) * rs * __bfloat162float(gamma[c]));
      const int v = __float2int_rn(__bfloat162float(y) * s);
      q[(size_t)r * hidden + c] = (int8_t)max(-128, min(127, v));
    }
  }
}

void rms_int8_static_launch(const __nv_bfloat16* x, const __nv_bfloat16* gamma, const float* scale, int8_t* q,
                            int rows, int hidden, float eps, cudaStream_t stream) {
  const int blocks = (rows + 7) / 8 < 264 ? (rows + 7) / 8 : 264;
  rms_int8_static<<<blocks, 256, 0, stream>>>(x, gamma, scale, q, rows, hidden, eps);
}
