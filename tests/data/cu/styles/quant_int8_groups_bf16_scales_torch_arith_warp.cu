// Per-group int8 quantization as a PyTorch reference computes it on bf16 tensors, ported to one kernel: groups of
// 128 consecutive values, scale = bf16(amax / 127) stored as bf16, q = round_half_even(clamp(bf16(x / scale), -128,
// 127)) where the division is a bf16 tensor op (its quotient rounded to bf16) by the bf16 scale as stored. One warp
// per group, four values a lane, eight groups a block of 256 threads.
#include <cuda_bf16.h>
#include <cstdint>

/* kerntune:
args  = ["q: out i8[groups * 128]", "s: out bf16[groups]", "x: in bf16[groups * 128]", "groups: i32 = groups"]
sizes = [{ groups = 262144 }, { groups = 56 }, { groups = 1001 }]
grid  = "cdiv(groups, 8)"
block = 256
*/
__global__ void quant_groups_torch_arith(int8_t* __restrict__ q, __nv_bfloat16* __restrict__ s,
                                         const __nv_bfloat16* __restrict__ x, int groups) {
  const int g = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (g >= groups) return;
  const __nv_bfloat16* in = x + (long long)g * 128;
  float v[4], amax = 0.f;
  for (int k = 0; k < 4; ++k) {
    v[k] = __bfloat162float(in[k * 32 + lane]);
    amax = fmaxf(amax, fabsf(v[k]));
  }
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const __nv_bfloat16 sc = __float2bfloat16(fmaxf(amax, 1e-8f) / 127.f);
  if (lane == 0) s[g] = sc;
  const float scf = __bfloat162float(sc);
  for (int k = 0; k < 4; ++k) {
    const float r = __bfloat162float(__float2bfloat16(v[k] / scf));
    q[(long long)g * 128 + k * 32 + lane] = (int8_t)rintf(fminf(fmaxf(r, -128.f), 127.f));
  }
}

void quant_groups_torch_arith_launch(int8_t* q, __nv_bfloat16* s, const __nv_bfloat16* x, int groups, cudaStream_t st) {
  quant_groups_torch_arith<<<(groups + 7) / 8, 256, 0, st>>>(q, s, x, groups);
}
