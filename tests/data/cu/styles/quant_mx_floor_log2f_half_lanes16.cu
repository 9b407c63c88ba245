// MX-style fp8 quantization with power-of-two scales kept as floats (an emulation path's scales, FBGEMM's MX4 /
// Triton style floor(log2(max))): fp16 input, groups of 32 along the row, 16 lanes a group (one __half2 per lane),
// a half-warp xor butterfly for the maximum. The scale is 2^(floorf(log2f(amax)) - 8), its exponent clamped to
// [-127, 127] (-127 for an all-zero group), made by exp2f; values divided by it, clamped to +-448 and converted to
// e4m3 (satfinite). fp32 scales [groups] row-major. The group count and the scales come first among the arguments.
#include <cuda_fp16.h>
#include <cuda_fp8.h>
/* kerntune:
args  = ["n_groups: i32 = R * H / 32", "sf: out f32[R * H / 32]", "in: in f16[R * H]", "out: out u8[R * H]"]
sizes = [{ R = 512, H = 4096 }, { R = 3, H = 1056 }]
grid  = "cdiv(R * H / 32, 16)"
block = "256"
*/
__global__ void mx_floor_quant(int n_groups, float* sf, const __half* in, __nv_fp8_e4m3* out) {
  const int grp = blockIdx.x * (blockDim.x / 16) + threadIdx.x / 16;
  if (grp >= n_groups) return;  // a half-warp leaves whole: its partner half-warp's shuffles stay within it
  const int l = threadIdx.x % 16;
  const float2 v = __half22float2(reinterpret_cast<const __half2*>(in)[(size_t)grp * 16 + l]);
  float amax = fmaxf(fabsf(v.x), fabsf(v.y));
  for (int o = 8; o >= 1; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o, 16));
  int e = amax > 0.f ? (int)floorf(log2f(amax)) - 8 : -127;
  e = max(-127, min(e, 127));
  const float sf_g = exp2f((float)e);
  out[(size_t)grp * 32 + 2 * l] = __nv_fp8_e4m3(fminf(fmaxf(v.x / sf_g, -448.f), 448.f));
  out[(size_t)grp * 32 + 2 * l + 1] = __nv_fp8_e4m3(fminf(fmaxf(v.y / sf_g, -448.f), 448.f));
  if (l == 0) sf[grp] = sf_g;
}

void mx_floor_quant_launch(const __half* in, __nv_fp8_e4m3* out, float* sf, int R, int H, cudaStream_t st) {
  const int n_groups = R * H / 32;
  mx_floor_quant<<<(n_groups + 15) / 16, 256, 0, st>>>(n_groups, sf, in, out);
}
