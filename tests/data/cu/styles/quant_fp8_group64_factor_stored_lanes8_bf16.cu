// fp8 e4m3 quantization of groups of 64 with the quantization scale stored (Transformer Engine's convention:
// scale = fp8_max / amax, the value the data is multiplied by; its inverse is what a GEMM reads): bf16 input, 8
// lanes a group, 8 values a lane, 16 groups per block of 128; amax floored at 1e-12 first, q = fp8(x * scale)
// through __nv_cvt_float_to_fp8 with __NV_SATFINITE, the scales then the data in the arguments.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cstdint>

/* kerntune:
args  = ["scale: out f32[tokens * hidden / 64]", "data: out u8[tokens * hidden]", "x: in bf16[tokens * hidden]",
         "n_groups: i32 = tokens * hidden / 64"]
sizes = [{ tokens = 4096, hidden = 4096 }, { tokens = 9, hidden = 1344 }]
grid  = "cdiv(tokens * hidden / 64, 16)"
block = "128"
*/
__global__ void fp8_group64_quant(float* __restrict__ scale, __nv_fp8_storage_t* __restrict__ data,
                                  const __nv_bfloat16* __restrict__ x, int n_groups) {
  const int group = blockIdx.x * 16 + threadIdx.x / 8;
  const int lane = threadIdx.x % 8;
  const bool valid = group < n_groups;
  float v[8];
  float amax = 0.f;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    v[j] = valid ? __bfloat162float(x[(int64_t)group * 64 + lane * 8 + j]) : 0.f;
    amax = fmaxf(amax, fabsf(v[j]));
  }
#pragma unroll
  for (int o = 4; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o, 8));
  amax = fmaxf(amax, 1e-12f);
  const float s = 448.f / amax;
  if (!valid) return;
  if (lane == 0) scale[group] = s;
#pragma unroll
  for (int j = 0; j < 8; ++j)
    data[(int64_t)group * 64 + lane * 8 + j] = __nv_cvt_float_to_fp8(v[j] * s, __NV_SATFINITE, __NV_E4M3);
}

void quantize_fp8_g64(float* scale, __nv_fp8_storage_t* data, const __nv_bfloat16* x, int tokens, int hidden,
                      cudaStream_t stream) {
  const int n_groups = tokens * hidden / 64;
  fp8_group64_quant<<<(n_groups + 15) / 16, 128, 0, stream>>>(scale, data, x, n_groups);
}
