// Per-token-group fp8 quantization with UE8M0 scales stored as bytes (DeepGEMM's fast_log2_ceil / fast_pow2 on the
// bits, SGLang's scale_ue8m0 as a uint8 tensor): fp32 input, groups of 128, one warp a group (a float4 per lane),
// amax floored at 1e-4, scale = 2^ceil(log2(amax / 448)) read from the bits of amax / 448 (its exponent field, plus
// one with any mantissa bit), the scale's exponent byte stored (uint8 [groups]); values multiplied by 1 / scale.
// The scale bytes come before the quantized values among the arguments; no group-count argument (rows, hidden).
#include <cuda_fp8.h>
#include <stdint.h>
/* kerntune:
args  = ["x: in f32[rows * hidden]", "s: out u8[rows * hidden / 128]", "y: out u8[rows * hidden]",
         "rows: i32 = rows", "hidden: i32 = hidden"]
sizes = [{ rows = 256, hidden = 7168 }, { rows = 5, hidden = 384 }]
grid  = "cdiv(rows * hidden / 128, 4)"
block = "128"
*/
__global__ void quant_ue8m0_bytes(const float* x, uint8_t* s, __nv_fp8_storage_t* y, int rows, int hidden) {
  const long long g = (long long)blockIdx.x * 4 + threadIdx.x / 32;
  if (g >= (long long)rows * hidden / 128) return;  // whole warps
  const int lane = threadIdx.x & 31;
  const float4 v = reinterpret_cast<const float4*>(x + g * 128)[lane];
  float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  amax = fmaxf(amax, 1e-4f);
  const float r = amax / 448.f;
  const uint32_t bits = __float_as_uint(r);
  const uint32_t exp_byte = ((bits >> 23) & 0xffu) + ((bits & ((1u << 23) - 1)) != 0u ? 1u : 0u);
  const float sc = __uint_as_float(exp_byte << 23);
  const float inv = 1.f / sc;
  uint32_t packed = 0;
  packed |= (uint32_t)__nv_cvt_float_to_fp8(fminf(fmaxf(v.x * inv, -448.f), 448.f), __NV_SATFINITE, __NV_E4M3);
  packed |= (uint32_t)__nv_cvt_float_to_fp8(fminf(fmaxf(v.y * inv, -448.f), 448.f), __NV_SATFINITE, __NV_E4M3) << 8;
  packed |= (uint32_t)__nv_cvt_float_to_fp8(fminf(fmaxf(v.z * inv, -448.f), 448.f), __NV_SATFINITE, __NV_E4M3) << 16;
  packed |= (uint32_t)__nv_cvt_float_to_fp8(fminf(fmaxf(v.w * inv, -448.f), 448.f), __NV_SATFINITE, __NV_E4M3) << 24;
  reinterpret_cast<uint32_t*>(y + g * 128)[lane] = packed;
  if (lane == 0) s[g] = (uint8_t)exp_byte;
}

void quant_ue8m0_bytes_launch(const float* x, uint8_t* s, __nv_fp8_storage_t* y, int rows, int hidden,
                              cudaStream_t st) {
  const int groups = rows * hidden / 128;
  quant_ue8m0_bytes<<<(groups + 3) / 4, 128, 0, st>>>(x, s, y, rows, hidden);
}
