// Per-token-group fp8 (e4m3) quantization, bf16 in, groups of 64, one block a token, 8 values a thread (one 16-byte
// load), a group's maximum over 8 lanes by xor shuffles; the maximum STARTED AT its floor (`float amax = 1e-6f;`
// then fmaxf with each |v|); the scale form chosen by a helper template on a bool given at its call from the
// kernel's own template argument: `if constexpr (kPow2Scale)` a power-of-two scale, else the factor 448 / amax
// multiplied in and amax / 448 stored (the spec instantiates false: the power-of-two branch is not compiled).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cstdint>

namespace q8 {
constexpr float kE4M3Max = 448.f;

template <bool kPow2Scale>
__device__ __forceinline__ float group_factor(float amax, float* scale_out) {
  if constexpr (kPow2Scale) {
    const float s = exp2f(ceilf(log2f(amax / kE4M3Max)));
    *scale_out = s;
    return 1.f / s;
  } else {
    *scale_out = amax / kE4M3Max;
    return kE4M3Max / amax;
  }
}

/* kerntune:
args  = ["in: in bf16[tokens * hidden]", "out: out u8[tokens * hidden]", "scales: out f32[tokens * hidden / 64]",
         "hidden: i32 = hidden"]
sizes = [{ tokens = 4096, hidden = 7168 }, { tokens = 3, hidden = 4096 }, { tokens = 777, hidden = 1536 }]
grid  = "tokens"
block = "hidden / 8"
template_args = ["false"]
*/
template <bool kPow2Scale>
__global__ void quant_fp8_groups(const __nv_bfloat16* __restrict__ in, uint8_t* __restrict__ out,
                                 float* __restrict__ scales, int hidden) {
  const int token = blockIdx.x;
  const int col = threadIdx.x * 8;
  const uint4 raw = *reinterpret_cast<const uint4*>(in + (size_t)token * hidden + col);
  const __nv_bfloat16* h = reinterpret_cast<const __nv_bfloat16*>(&raw);
  float v[8];
  float amax = 1e-6f;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    v[j] = __bfloat162float(h[j]);
    amax = fmaxf(amax, fabsf(v[j]));
  }
#pragma unroll
  for (int m = 4; m > 0; m >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
  float scale;
  const float factor = group_factor<kPow2Scale>(amax, &scale);
  if ((threadIdx.x & 7) == 0) scales[((size_t)token * hidden + col) / 64] = scale;
  uint8_t* dst = out + (size_t)token * hidden + col;
#pragma unroll
  for (int j = 0; j < 8; ++j) dst[j] = __nv_fp8_e4m3(v[j] * factor).__x;
}

void quantize_fp8_groups(const __nv_bfloat16* in, uint8_t* out, float* scales, int tokens, int hidden, bool pow2,
                         cudaStream_t stream) {
  if (pow2)
    quant_fp8_groups<true><<<tokens, hidden / 8, 0, stream>>>(in, out, scales, hidden);
  else
    quant_fp8_groups<false><<<tokens, hidden / 8, 0, stream>>>(in, out, scales, hidden);
}
}  // namespace q8
