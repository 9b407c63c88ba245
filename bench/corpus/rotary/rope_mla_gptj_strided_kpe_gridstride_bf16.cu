// Rotary embedding of DeepSeek-V2/V3 multi-head latent attention (MLA), applied where the projections leave their
// rotary parts, in place: the query q [num_tokens, num_heads, q_head_dim = 192] carries its 64 rotary channels at
// the END of each head (channels qk_nope_head_dim = 128 .. 191; the first 128 are not rotated), and the single
// shared rotary key k_pe is the tail of each row of the compressed-KV projection kv_a [num_tokens, 576]
// (channels kv_lora_rank = 512 .. 575 of a row kv_a_row_stride apart; the latent part is not touched).
// Pairs are GPT-J style (2i, 2i + 1) as serving code rotates DeepSeek (not NeoX halves); the cos_sin_cache is fp32
// [4096, 64] with the 32 cosines first and the 32 sines after (the YaRN scaling already folded in), looked up by
// int64 positions:
//   x0' = x0 * cos_i - x1 * sin_i,  x1' = x1 * cos_i + x0 * sin_i    (fp32, one bf16 rounding per output)
// A grid-stride loop over one flat 64-bit index of (token, head, pair), the num_heads query heads then the key as
// head num_heads, a thread per pair; blocks of 256, the grid capped at 8192 blocks.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <algorithm>
#include <cstdint>

constexpr int kRopeDim = 64;  // qk_rope_head_dim
constexpr int kRopePairs = kRopeDim / 2;
constexpr int kRopeThreads = 256;
constexpr int kMaxRopeBlocks = 8192;

/* kerntune:
args  = ["positions: in i64[num_tokens] ~ randint(0, 4096)",
         "q: inout bf16[num_tokens * num_heads * 192]", "kv_a: inout bf16[num_tokens * 576]",
         "cos_sin_cache: in f32[4096 * 64] ~ uniform(-1, 1)",
         "num_tokens: i32 = num_tokens", "num_heads: i32 = num_heads", "q_head_dim: i32 = 192",
         "qk_nope_head_dim: i32 = 128", "kv_a_row_stride: i32 = 576", "kv_lora_rank: i32 = 512"]
sizes = [{ num_tokens = 4096, num_heads = 128 }, { num_tokens = 8, num_heads = 16 },
         { num_tokens = 1001, num_heads = 32 }]
grid  = "min(cdiv(num_tokens * (num_heads + 1) * 32, 256), 8192)"
block = 256
*/
__global__ void mla_rope_gptj_kernel(const int64_t* __restrict__ positions, __nv_bfloat16* __restrict__ q,
                                     __nv_bfloat16* __restrict__ kv_a, const float* __restrict__ cos_sin_cache,
                                     const int num_tokens, const int num_heads, const int q_head_dim,
                                     const int qk_nope_head_dim, const int kv_a_row_stride, const int kv_lora_rank) {
  const int heads_per_token = num_heads + 1;  // the query heads, then the shared k_pe
  const int64_t total = static_cast<int64_t>(num_tokens) * heads_per_token * kRopePairs;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int pair = static_cast<int>(i % kRopePairs);
    const int64_t token_head = i / kRopePairs;
    const int head = static_cast<int>(token_head % heads_per_token);
    const int64_t token = token_head / heads_per_token;

    const float* cache = cos_sin_cache + positions[token] * kRopeDim;
    const float cos_v = cache[pair];
    const float sin_v = cache[kRopePairs + pair];

    __nv_bfloat16* rot = head < num_heads
                             ? q + (token * num_heads + head) * q_head_dim + qk_nope_head_dim
                             : kv_a + token * kv_a_row_stride + kv_lora_rank;
    const float x0 = __bfloat162float(rot[2 * pair]);
    const float x1 = __bfloat162float(rot[2 * pair + 1]);
    rot[2 * pair] = __float2bfloat16(x0 * cos_v - x1 * sin_v);
    rot[2 * pair + 1] = __float2bfloat16(x1 * cos_v + x0 * sin_v);
  }
}

// positions: [num_tokens] int64; q: [num_tokens, num_heads, q_head_dim] bf16 (rotary channels last);
// kv_a: [num_tokens, kv_a_row_stride] bf16 (k_pe at kv_lora_rank); cos_sin_cache: [max_position, 64] fp32.
void mla_rope_gptj(const int64_t* positions, __nv_bfloat16* q, __nv_bfloat16* kv_a, const float* cos_sin_cache,
                   int num_tokens, int num_heads, int q_head_dim, int qk_nope_head_dim, int kv_a_row_stride,
                   int kv_lora_rank, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(num_tokens) * (num_heads + 1) * kRopePairs;
  if (total == 0) return;
  const int64_t blocks_needed = (total + kRopeThreads - 1) / kRopeThreads;
  const int grid = static_cast<int>(std::min<int64_t>(blocks_needed, kMaxRopeBlocks));
  mla_rope_gptj_kernel<<<grid, kRopeThreads, 0, stream>>>(positions, q, kv_a, cos_sin_cache, num_tokens, num_heads,
                                                          q_head_dim, qk_nope_head_dim, kv_a_row_stride,
                                                          kv_lora_rank);
}
