// Per-token-group ASYMMETRIC 8-bit quantization with a floating-point zero (the min/max scheme of KIVI-style KV
// cache and activation quantizers, as lmdeploy and QServe-era code quantize groups): for each group of group_size
// consecutive channels of a token,
//   mn = min(x), mx = max(x), scale = max(mx - mn, 1e-5) / 255, zero = mn,
//   q = uint8(clamp(rint((x - zero) / scale), 0, 255))          (dequantized as q * scale + zero)
// x bf16 [num_tokens, hidden]; q uint8 [num_tokens, hidden]; scale and zero stored interleaved as fp32 pairs
// scale_zero [num_tokens, hidden / group_size, 2] (scale first). group_size a runtime argument (64 or 128).
// Launch: a warp per group, 4 groups per block on threadIdx.y: block (32, 4), 2-D grid
// (ceil(groups per token / 4), num_tokens) with blockIdx.y the token; each lane reads __nv_bfloat162 pairs with
// __ldg (pair p = lane + 32 * j), min and max reduced by full-mask xor shuffles, then a second read of the pairs to
// quantize them; lane 0 writes the (scale, zero) pair. Warps past the token's last group return.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cassert>
#include <cstdint>
#include <cmath>

constexpr int kGroupsPerBlock = 4;
constexpr float kQuantMax = 255.0f;
constexpr float kMinRange = 1e-5f;

/* kerntune:
args  = ["q: out u8[num_tokens * hidden]", "scale_zero: out f32[num_tokens * hidden / 128 * 2]",
         "x: in bf16[num_tokens * hidden]", "hidden: i32 = hidden", "group_size: i32 = 128"]
sizes = [{ num_tokens = 8192, hidden = 4096 }, { num_tokens = 4, hidden = 8192 }, { num_tokens = 1001, hidden = 2944 }]
grid  = ["cdiv(hidden / 128, 4)", "num_tokens"]
block = [32, 4]
*/
__global__ void group_quant_asym_u8_kernel(uint8_t* __restrict__ q, float* __restrict__ scale_zero,
                                           const __nv_bfloat16* __restrict__ x, const int hidden,
                                           const int group_size) {
  const int token = blockIdx.y;
  const int groups_per_token = hidden / group_size;
  const int group = blockIdx.x * kGroupsPerBlock + threadIdx.y;
  const int lane = threadIdx.x;
  if (group >= groups_per_token) return;  // the whole warp

  const int64_t base = static_cast<int64_t>(token) * hidden + static_cast<int64_t>(group) * group_size;
  const __nv_bfloat162* x2 = reinterpret_cast<const __nv_bfloat162*>(x + base);
  const int num_pairs = group_size / 2;

  float mn = INFINITY, mx = -INFINITY;
  for (int p = lane; p < num_pairs; p += 32) {
    const float2 v = __bfloat1622float2(__ldg(x2 + p));
    mn = fminf(mn, fminf(v.x, v.y));
    mx = fmaxf(mx, fmaxf(v.x, v.y));
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    mn = fminf(mn, __shfl_xor_sync(0xffffffffu, mn, offset));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, offset));
  }
  const float scale = fmaxf(mx - mn, kMinRange) / kQuantMax;
  const float zero = mn;

  uint8_t* q_group = q + base;
  for (int p = lane; p < num_pairs; p += 32) {
    const float2 v = __bfloat1622float2(__ldg(x2 + p));
    const float q0 = fminf(fmaxf(rintf((v.x - zero) / scale), 0.0f), kQuantMax);
    const float q1 = fminf(fmaxf(rintf((v.y - zero) / scale), 0.0f), kQuantMax);
    q_group[2 * p] = static_cast<uint8_t>(q0);
    q_group[2 * p + 1] = static_cast<uint8_t>(q1);
  }
  if (lane == 0) {
    const int64_t sz = (static_cast<int64_t>(token) * groups_per_token + group) * 2;
    scale_zero[sz] = scale;
    scale_zero[sz + 1] = zero;
  }
}

// q: [num_tokens, hidden] uint8; scale_zero: [num_tokens, hidden / group_size, 2] fp32; x: [num_tokens, hidden]
// bf16. Device pointers; hidden a multiple of group_size, group_size even.
void group_quant_asym_u8(uint8_t* q, float* scale_zero, const __nv_bfloat16* x, int num_tokens, int hidden,
                         int group_size, cudaStream_t stream) {
  assert(group_size % 2 == 0 && hidden % group_size == 0);
  if (num_tokens == 0) return;
  const int groups_per_token = hidden / group_size;
  const dim3 grid((groups_per_token + kGroupsPerBlock - 1) / kGroupsPerBlock, num_tokens);
  const dim3 block(32, kGroupsPerBlock);
  group_quant_asym_u8_kernel<<<grid, block, 0, stream>>>(q, scale_zero, x, hidden, group_size);
}
