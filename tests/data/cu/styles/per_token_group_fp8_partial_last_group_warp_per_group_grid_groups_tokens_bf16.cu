// Per-token-group fp8 quantization of rows whose length the group of 128 does not always divide: each row's last
// group holds the rest (cdiv(hidden, 128) scales a row), one warp a group, the grid (groups of a row, tokens), bf16 in,
// e4m3 bytes out, scale = max(amax, eps) / 448 stored row-major [tokens, cdiv(hidden, 128)], x / scale.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <stdint.h>

/* kerntune:
args  = ["x: in bf16[T * H]", "q: out u8[T * H]", "scales: out f32[T * cdiv(H, 128)]", "tokens: i32 = T",
         "hidden: i32 = H", "eps: f32 = 1e-10"]
sizes = [{ T = 4096, H = 7168 }, { T = 7, H = 2880 }, { T = 333, H = 1000 }]
grid  = ["cdiv(H, 128)", "T"]
block = 32
*/
__global__ void quant_groups_tail(const __nv_bfloat16* __restrict__ x, uint8_t* __restrict__ q,
                                  float* __restrict__ scales, int tokens, int hidden, float eps) {
  const int g = blockIdx.x, t = blockIdx.y, lane = threadIdx.x;
  const int start = g * 128;
  const int n = min(128, hidden - start);
  const __nv_bfloat16* row = x + (int64_t)t * hidden + start;
  float amax = 0.f;
  for (int i = lane; i < n; i += 32) amax = fmaxf(amax, fabsf(__bfloat162float(row[i])));
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float scale = fmaxf(amax, eps) / 448.f;
  if (lane == 0) scales[(int64_t)t * ((hidden + 127) / 128) + g] = scale;
  uint8_t* out = q + (int64_t)t * hidden + start;
  for (int i = lane; i < n; i += 32) {
    const float v = __bfloat162float(row[i]) / scale;
    out[i] = __nv_cvt_float_to_fp8(fminf(fmaxf(v, -448.f), 448.f), __NV_SATFINITE, __NV_E4M3);
  }
}
