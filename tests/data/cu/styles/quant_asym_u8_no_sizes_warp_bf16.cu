// asymmetric uint8 group quantization (a KV-cache quantizer ported from a framework's reference), bf16 input, one
// warp per group of 64 (two values a lane), no size argument at all: the group count is only in the host's grid;
// (scale, zero) float pairs per group, zero = the group's minimum
#include <cuda_bf16.h>
#include <stdint.h>

constexpr int kGroup = 64;

/* kerntune:
args  = ["src: in bf16[tokens * dim]", "dst: out u8[tokens * dim]", "params: out f32[tokens * dim / 32]"]
sizes = [{ tokens = 256, dim = 4096 }, { tokens = 5, dim = 832 }]
grid  = "tokens * dim / 64"
block = 32
*/
__global__ void kv_quant_asym_u8(const __nv_bfloat16* __restrict__ src, uint8_t* __restrict__ dst,
                                 float* __restrict__ params) {
  const size_t base = (size_t)blockIdx.x * kGroup;
  const float a = __bfloat162float(src[base + threadIdx.x]);
  const float b = __bfloat162float(src[base + threadIdx.x + 32]);
  float lo = fminf(a, b), hi = fmaxf(a, b);
  for (int o = 16; o > 0; o >>= 1) {
    lo = fminf(lo, __shfl_xor_sync(0xffffffffu, lo, o));
    hi = fmaxf(hi, __shfl_xor_sync(0xffffffffu, hi, o));
  }
  const float scale = fmaxf(hi - lo, 1e-6f) / 255.f;
  if (threadIdx.x == 0) {
    params[2 * blockIdx.x] = scale;
    params[2 * blockIdx.x + 1] = lo;
  }
  dst[base + threadIdx.x] = (uint8_t)fminf(fmaxf(rintf((a - lo) / scale), 0.f), 255.f);
  dst[base + threadIdx.x + 32] = (uint8_t)fminf(fmaxf(rintf((b - lo) / scale), 0.f), 255.f);
}

void kv_quant_asym(const __nv_bfloat16* src, uint8_t* dst, float* params, int tokens, int dim, cudaStream_t stream) {
  kv_quant_asym_u8<<<tokens * dim / kGroup, 32, 0, stream>>>(src, dst, params);
}
