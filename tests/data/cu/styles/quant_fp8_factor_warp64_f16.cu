// Per-token-group fp8 (e4m3) quantization by the factor FP8_MAX / amax (the DeepGEMM reference's convention, not x /
// scale): fp16 input, groups of 64, one warp per group (two halves a lane, one __half2 load), 8 groups a block over a
// flat group index; amax floored at a #define'd MIN_AMAX (taken first in the fmaxf); the fp8 values through the
// __nv_fp8_e4m3 constructor (saturating, round to nearest even), the scale amax / FP8_MAX stored column-major
// [H / 64, T]. The outputs come first among the arguments, the input last.
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#define FP8_MAX 448.0f
#define MIN_AMAX 1e-6f

/* kerntune:
args  = ["xq: out u8[T * H]", "xs: out f32[H / 64 * T]", "x: in f16[T * H]", "T: i32 = T", "H: i32 = H"]
sizes = [{ T = 96, H = 2048 }, { T = 5, H = 7168 }, { T = 33, H = 1536 }]
grid  = "cdiv(T * (H / 64), 8)"
block = "256"
*/
__global__ void fp8_quant_factor_warp64(__nv_fp8_e4m3* xq, float* xs, const __half* x, int T, int H) {
  const int G = H / 64;
  const int w = (blockIdx.x * blockDim.x + threadIdx.x) / 32;  // the warp's group, flat over the tokens
  if (w >= T * G) return;  // whole warps leave: the shuffles below keep the full mask
  const int lane = threadIdx.x % 32;
  const int t = w / G, c = w % G;
  const size_t base = (size_t)t * H + (size_t)c * 64;
  const float2 f = __half22float2(reinterpret_cast<const __half2*>(x + base)[lane]);
  float amax = fmaxf(fabsf(f.x), fabsf(f.y));
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  amax = fmaxf(MIN_AMAX, amax);
  const float factor = FP8_MAX / amax;
  xq[base + 2 * lane] = __nv_fp8_e4m3(f.x * factor);
  xq[base + 2 * lane + 1] = __nv_fp8_e4m3(f.y * factor);
  if (lane == 0) xs[(size_t)c * T + t] = amax / FP8_MAX;
}

void fp8_quant_factor_warp64_launch(__nv_fp8_e4m3* xq, float* xs, const __half* x, int T, int H, cudaStream_t st) {
  const int groups = T * (H / 64);
  fp8_quant_factor_warp64<<<(groups + 7) / 8, 256, 0, st>>>(xq, xs, x, T, H);
}
