// Per-token-group fp8 quantization with UE8M0 scales packed four to an int32 in TMA-aligned columns, in the style of
// vLLM's packed register kernel: word w of token m at w * Ma + m (Ma the tokens rounded up to 4), group k of a
// token in byte k % 4 of its word k / 4, each byte stored on its own through a byte pointer by its group's lane 0
// (four groups, four distinct bytes: no two threads write one byte). The padding (the groups past G in a token's
// last word, the tokens from M to Ma) is written 0. bf16 input, groups of 128, 8 lanes a group of two 16-byte
// loads each, a 2-D grid: 4 tokens by 4 groups a block. Powers of two on the bits, values times 1 / scale.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <stdint.h>
/* kerntune:
args  = ["in: in bf16[M * G * 128]", "q: out u8[M * G * 128]", "sf: out i32[cdiv(G, 4) * round_up(M, 4)]",
         "G: i32 = G", "M: i32 = M", "Ma: i32 = round_up(M, 4)", "eps: f32 = 1e-10"]
sizes = [{ M = 256, G = 56 }, { M = 13, G = 22 }, { M = 6, G = 25 }]
grid  = ["round_up(M, 4) / 4", "cdiv(G, 4)"]
block = "128"
*/
__global__ void quant_ue8m0_tma_cols(const __nv_bfloat16* in, __nv_fp8_e4m3* q, int* sf, int G, int M, int Ma,
                                     float eps) {
  const int grp = threadIdx.x / 8, lane = threadIdx.x % 8;
  const int k = blockIdx.y * 4 + grp % 4;  // the group's column in its token (< 4 * cdiv(G, 4))
  const int m = blockIdx.x * 4 + grp / 4;  // the token (< Ma)
  const bool valid = m < M && k < G;
  const size_t base = ((size_t)m * G + k) * 128 + lane * 16;
  float v[16];
  float amax = 0.f;
  if (valid) {
    uint4 raw[2];
    raw[0] = reinterpret_cast<const uint4*>(in + base)[0];
    raw[1] = reinterpret_cast<const uint4*>(in + base)[1];
    const __nv_bfloat16* h = reinterpret_cast<const __nv_bfloat16*>(raw);
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      v[i] = __bfloat162float(h[i]);
      amax = fmaxf(amax, fabsf(v[i]));
    }
  }
  const unsigned mask = 0xffu << (threadIdx.x & 24u);
  for (int o = 4; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(mask, amax, o));
  const unsigned bits = __float_as_uint(fmaxf(amax, eps) / 448.f);
  const unsigned e = ((bits >> 23) & 0xffu) + ((bits & 0x7fffffu) != 0u ? 1u : 0u);
  if (lane == 0) reinterpret_cast<uint8_t*>(sf)[((size_t)(k / 4) * Ma + m) * 4 + k % 4] = valid ? (uint8_t)e : 0;
  if (!valid) return;
  const float inv = 1.f / __uint_as_float(e << 23);
#pragma unroll
  for (int i = 0; i < 16; ++i) q[base + i] = __nv_fp8_e4m3(fminf(fmaxf(v[i] * inv, -448.f), 448.f));
}

void quant_ue8m0_tma_cols_launch(const __nv_bfloat16* in, __nv_fp8_e4m3* q, int* sf, int M, int G, cudaStream_t st) {
  const int Ma = (M + 3) / 4 * 4;
  quant_ue8m0_tma_cols<<<dim3(Ma / 4, (G + 3) / 4), 128, 0, st>>>(in, q, sf, G, M, Ma, 1e-10f);
}
