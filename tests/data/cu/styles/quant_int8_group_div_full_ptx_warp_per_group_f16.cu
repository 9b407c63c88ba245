// Per-token-group int8 quantization fp16 written to agree with a Triton kernel bit for bit: the scale absmax / 127 is
// taken by inline PTX div.full.f32 (Triton's fp32 division), floored by eps on the absmax; the values divided by the
// scale (IEEE) and rounded to nearest even. A warp per group of 64 (two values a lane), 8 groups per block, a flat grid
// over every group of every token.
#include <cuda_fp16.h>
#include <cstdint>

/* kerntune:
args  = ["input: in f16[tokens * hidden]", "output_q: out i8[tokens * hidden]",
         "output_s: out f32[tokens * hidden / 64]", "num_groups: i32 = tokens * hidden / 64", "eps: f32 = 1e-10"]
sizes = [{ tokens = 4096, hidden = 8192 }, { tokens = 3, hidden = 1024 }]
grid  = "cdiv(tokens * hidden / 64, 8)"
block = [32, 8]
*/
__global__ void group_quant_div_full(const __half* __restrict__ input, int8_t* __restrict__ output_q,
                                     float* __restrict__ output_s, int num_groups, float eps) {
  const int g = blockIdx.x * 8 + threadIdx.y;
  if (g >= num_groups) return;
  const __half* src = input + (long long)g * 64;
  const float a = __half2float(src[threadIdx.x]), b = __half2float(src[threadIdx.x + 32]);
  float amax = fmaxf(fabsf(a), fabsf(b));
  for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  amax = fmaxf(amax, eps);
  float scale;
  asm("div.full.f32 %0, %1, %2;" : "=f"(scale) : "f"(amax), "f"(127.0f));
  if (threadIdx.x == 0) output_s[g] = scale;
  int8_t* dst = output_q + (long long)g * 64;
  dst[threadIdx.x] = (int8_t)max(-128, min(127, __float2int_rn(a / scale)));
  dst[threadIdx.x + 32] = (int8_t)max(-128, min(127, __float2int_rn(b / scale)));
}
