// Symmetric int8 groups with the quantization range as a power of two (DeepSpeed / ZeroQuant style: the factor
// 2^bits / (2 * absmax), so +absmax maps to 128 and is clamped to 127), in another style than DeepSpeed's
// cached_quantization: bf16 input, one warp per group (a strided loop, up to 8 values a lane in registers), 4 groups
// a block, a plain launch; the bit count a #define, the factor 1 for an all-zero group (absmax > 0 tested), rintf and
// a float clamp to [-128, 127], and the factor itself stored (a later dequantization divides by it). The input
// comes first, then the factors, then the codes.
#include <cuda_bf16.h>
#include <stdint.h>

#define QUANT_BITS 8
#define WARPS 4

/* kerntune:
args  = ["x: in bf16[num_groups * group_size]", "q_scales: out f32[num_groups]",
         "q: out i8[num_groups * group_size]", "num_groups: i32 = num_groups", "group_size: i32 = group_size"]
sizes = [{ num_groups = 4096, group_size = 128 }, { num_groups = 77, group_size = 256 }, { num_groups = 1030, group_size = 64 }]
grid  = "cdiv(num_groups, 4)"
block = "128"
*/
__global__ void int8_qrange_quant_warp(const __nv_bfloat16* __restrict__ x, float* __restrict__ q_scales,
                                       int8_t* __restrict__ q, int num_groups, int group_size) {
  const int g = blockIdx.x * WARPS + threadIdx.x / 32;
  if (g >= num_groups) return;  // whole warps leave: the shuffles below keep the full mask
  const int lane = threadIdx.x % 32;
  const __nv_bfloat16* row = x + (size_t)g * group_size;
  float v[8];
  float absmax = 0.f;
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const int i = lane + 32 * k;
    v[k] = i < group_size ? __bfloat162float(row[i]) : 0.f;
    absmax = fmaxf(absmax, fabsf(v[k]));
  }
  for (int o = 16; o > 0; o >>= 1) absmax = fmaxf(absmax, __shfl_xor_sync(0xffffffffu, absmax, o));
  const float q_scale = absmax > 0.f ? (float)(1 << QUANT_BITS) / (2.f * absmax) : 1.f;
  int8_t* out = q + (size_t)g * group_size;
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const int i = lane + 32 * k;
    if (i < group_size) out[i] = (int8_t)fminf(fmaxf(rintf(v[k] * q_scale), -128.f), 127.f);
  }
  if (lane == 0) q_scales[g] = q_scale;
}

void int8_qrange_quant(const __nv_bfloat16* x, float* q_scales, int8_t* q, int num_groups, int group_size,
                       cudaStream_t stream) {
  int8_qrange_quant_warp<<<(num_groups + WARPS - 1) / WARPS, 32 * WARPS, 0, stream>>>(x, q_scales, q, num_groups,
                                                                                      group_size);
}
