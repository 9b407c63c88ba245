// Per-token fp8 e4m3 quantization as SGLang's per_token_quant_fp8 writes it for many tokens: one warp per token,
// 8 tokens per block of 256, int64 sizes after the pointers, 16-byte loads of 8 bf16; scale = absmax / 448 (no
// floor) stored per token, the values multiplied by 1 / scale, clamped to +-448 and converted by the
// __nv_fp8_e4m3 constructor (saturating, to nearest even).
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cstdint>

constexpr int kTokensPerCTA = 8;
constexpr float kFp8Max = 448.0f;

/* kerntune:
args  = ["input: in bf16[num_tokens * hidden_dim]", "output_q: out u8[num_tokens * hidden_dim]",
         "output_s: out f32[num_tokens]", "hidden_dim: i64 = hidden_dim", "num_tokens: i64 = num_tokens"]
sizes = [{ num_tokens = 4096, hidden_dim = 7168 }, { num_tokens = 11, hidden_dim = 2048 }]
grid  = "cdiv(num_tokens, 8)"
block = "256"
*/
__global__ void per_token_quant_fp8(const __nv_bfloat16* __restrict__ input, __nv_fp8_e4m3* __restrict__ output_q,
                                    float* __restrict__ output_s, const int64_t hidden_dim, const int64_t num_tokens) {
  const int warp_id = threadIdx.x / 32;
  const int lane_id = threadIdx.x & 31;
  const int64_t token_id = (int64_t)blockIdx.x * kTokensPerCTA + warp_id;
  if (token_id >= num_tokens) return;
  const __nv_bfloat16* token_in = input + token_id * hidden_dim;
  __nv_fp8_e4m3* token_out = output_q + token_id * hidden_dim;
  const int64_t num_vecs = hidden_dim / 8;

  float max_value = 0.f;
  for (int64_t i = lane_id; i < num_vecs; i += 32) {
    const uint4 packed = *reinterpret_cast<const uint4*>(token_in + i * 8);
    const __nv_bfloat16* vals = reinterpret_cast<const __nv_bfloat16*>(&packed);
#pragma unroll
    for (int j = 0; j < 8; ++j) max_value = fmaxf(max_value, fabsf(__bfloat162float(vals[j])));
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) max_value = fmaxf(max_value, __shfl_xor_sync(0xffffffffu, max_value, o));
  const float scale = max_value / kFp8Max;
  if (lane_id == 0) output_s[token_id] = scale;
  const float scale_inv = 1.0f / scale;

  for (int64_t i = lane_id; i < num_vecs; i += 32) {
    const uint4 packed = *reinterpret_cast<const uint4*>(token_in + i * 8);
    const __nv_bfloat16* vals = reinterpret_cast<const __nv_bfloat16*>(&packed);
    __nv_fp8_e4m3 out[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float v = fmaxf(fminf(__bfloat162float(vals[j]) * scale_inv, kFp8Max), -kFp8Max);
      out[j] = __nv_fp8_e4m3(v);
    }
    *reinterpret_cast<uint2*>(token_out + i * 8) = *reinterpret_cast<const uint2*>(out);
  }
}

void per_token_quant_fp8_launch(const __nv_bfloat16* input, __nv_fp8_e4m3* output_q, float* output_s,
                                int64_t num_tokens, int64_t hidden_dim, cudaStream_t stream) {
  const int64_t blocks = (num_tokens + kTokensPerCTA - 1) / kTokensPerCTA;
  per_token_quant_fp8<<<(unsigned)blocks, kTokensPerCTA * 32, 0, stream>>>(input, output_q, output_s, hidden_dim,
                                                                           num_tokens);
}
