// Fused SiLU-and-mul with a static per-tensor FP8 output scale, as serving code runs it in front of an FP8 down
// projection (vLLM's silu_and_mul_quant contract): input fp16 [num_tokens, 2 * d] with the gate half first, out fp8
// e4m3 [num_tokens, d], scale a one-element fp32 device tensor holding the dequantization scale (inverted once per
// thread):
//   out = e4m3(clamp(fp16(fp16(silu(gate)) * up) * (1 / scale), -448, 448))
// silu is computed in fp32 and rounded to fp16, the product is taken in fp16 (__hmul2, rounded), and only then is
// the value widened to fp32 for the scale.
// Launch: blockIdx.x is the token; for few tokens the row is split over gridDim.y = 4 (<= 16 tokens), 2 (<= 32) or
// 1 blocks, each taking a chunk of the row rounded up to whole 16-byte packs; block = min(d, 512). When d % 8 == 0
// (rows 16-byte aligned) a thread handles packs of 8 halves (a union of uint4 and __half2[4], read with __ldg) and
// writes 8 fp8 bytes at once (a union of uint2 and __nv_fp8_storage_t[8]); otherwise single elements.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <algorithm>
#include <cstdint>

namespace act_quant {

constexpr float kFp8E4m3Max = 448.0f;
constexpr int kPackElems = 8;  // halves per 16-byte load

union HalfPack {
  uint4 raw;
  __half2 h2[kPackElems / 2];
};

union Fp8Pack {
  uint2 raw;
  __nv_fp8_storage_t q[kPackElems];
};

__device__ __forceinline__ __half silu_rounded(const __half x) {
  const float f = __half2float(x);
  return __float2half(f / (1.0f + expf(-f)));
}

__device__ __forceinline__ __nv_fp8_storage_t quant_e4m3(const float v, const float inv_scale) {
  const float r = fminf(fmaxf(v * inv_scale, -kFp8E4m3Max), kFp8E4m3Max);
  return __nv_cvt_float_to_fp8(r, __NV_SATFINITE, __NV_E4M3);
}

/* kerntune:
args  = ["out: out u8[num_tokens * d]", "input: in f16[num_tokens * 2 * d]",
         "scale: in f32[1] ~ uniform(0.02, 0.04)", "d: i32 = d"]
sizes = [{ num_tokens = 4096, d = 14336 }, { num_tokens = 8, d = 14336 }, { num_tokens = 21, d = 2999 }]
grid  = ["num_tokens", "1 if num_tokens > 32 else 2 if num_tokens > 16 else 4"]
block = "min(d, 512)"
*/
__global__ void silu_and_mul_quant_kernel(__nv_fp8_e4m3* __restrict__ out, const __half* __restrict__ input,
                                          const float* __restrict__ scale, const int d) {
  const int64_t token = blockIdx.x;
  const int chunk_target = (d + static_cast<int>(gridDim.y) - 1) / static_cast<int>(gridDim.y);
  const int chunk = (chunk_target + kPackElems - 1) / kPackElems * kPackElems;
  const int begin = static_cast<int>(blockIdx.y) * chunk;
  const int end = min(begin + chunk, d);

  const __half* gate = input + token * 2 * d;
  const __half* up = gate + d;
  __nv_fp8_e4m3* out_row = out + token * d;
  const float inv_scale = 1.0f / __ldg(scale);

  if (d % kPackElems == 0) {
    const uint4* gate_packs = reinterpret_cast<const uint4*>(gate);
    const uint4* up_packs = reinterpret_cast<const uint4*>(up);
    uint2* out_packs = reinterpret_cast<uint2*>(out_row);
    for (int p = begin / kPackElems + threadIdx.x; p < end / kPackElems; p += blockDim.x) {
      HalfPack g, u;
      g.raw = __ldg(gate_packs + p);
      u.raw = __ldg(up_packs + p);
      Fp8Pack o;
#pragma unroll
      for (int j = 0; j < kPackElems / 2; ++j) {
        const __half2 act = __halves2half2(silu_rounded(__low2half(g.h2[j])), silu_rounded(__high2half(g.h2[j])));
        const float2 prod = __half22float2(__hmul2(act, u.h2[j]));
        o.q[2 * j] = quant_e4m3(prod.x, inv_scale);
        o.q[2 * j + 1] = quant_e4m3(prod.y, inv_scale);
      }
      out_packs[p] = o.raw;
    }
  } else {
    for (int i = begin + threadIdx.x; i < end; i += blockDim.x) {
      const __half prod = __hmul(silu_rounded(gate[i]), up[i]);
      out_row[i].__x = quant_e4m3(__half2float(prod), inv_scale);
    }
  }
}

}  // namespace act_quant

// out: [num_tokens, d] fp8 e4m3; input: [num_tokens, 2 * d] fp16 (gate | up); scale: [1] fp32. Device pointers.
void silu_and_mul_quant(__nv_fp8_e4m3* out, const __half* input, const float* scale, int64_t num_tokens, int d,
                        cudaStream_t stream) {
  if (num_tokens == 0 || d == 0) return;
  const unsigned splits = num_tokens > 16 ? (num_tokens > 32 ? 1 : 2) : 4;
  const dim3 grid(static_cast<unsigned>(num_tokens), splits);
  const dim3 block(std::min(d, 512));
  act_quant::silu_and_mul_quant_kernel<<<grid, block, 0, stream>>>(out, input, scale, d);
}
