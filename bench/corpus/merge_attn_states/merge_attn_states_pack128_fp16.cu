// Merge of prefix and suffix attention outputs (fp16, fp32 natural-log lse laid out [num_heads, num_tokens]) in the
// style of vLLM's csrc/attention/merge_attn_states.cu: a kernel template over the element type and the block size,
// one thread per 128-bit pack of the head (8 halves), a flat grid over tokens * heads * packs, +inf lse treated as
// -inf, and an optional output lse written by the first pack of each head. Requires head_size % 8 == 0.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cmath>

namespace attn {

/* kerntune:
args  = ["output: out f16[num_tokens * num_heads * head_size]", "output_lse: out f32[num_heads * num_tokens]",
         "prefix_output: in f16[num_tokens * num_heads * head_size]",
         "prefix_lse: in f32[num_heads * num_tokens] ~ uniform(-4, 12)",
         "suffix_output: in f16[num_tokens * num_heads * head_size]",
         "suffix_lse: in f32[num_heads * num_tokens] ~ uniform(-4, 12)", "num_tokens: u32 = num_tokens",
         "num_heads: u32 = num_heads", "head_size: u32 = head_size"]
sizes = [{ num_tokens = 8192, num_heads = 32, head_size = 128 }, { num_tokens = 64, num_heads = 64, head_size = 64 },
         { num_tokens = 1001, num_heads = 28, head_size = 128 }]
grid  = "cdiv(num_tokens * num_heads * (head_size / 8), 128)"
block = "128"
*/
template <typename scalar_t, const uint NUM_THREADS>
__global__ void merge_attn_states_kernel(scalar_t* output, float* output_lse, const scalar_t* prefix_output,
                                         const float* prefix_lse, const scalar_t* suffix_output,
                                         const float* suffix_lse, const uint num_tokens, const uint num_heads,
                                         const uint head_size) {
  using pack_128b_t = uint4;
  const uint pack_size = 16 / sizeof(scalar_t);
  const uint threads_per_head = head_size / pack_size;

  const uint global_idx = blockIdx.x * NUM_THREADS + threadIdx.x;
  const uint token_head_threads = num_tokens * num_heads * threads_per_head;
  if (global_idx >= token_head_threads) return;

  // global_idx -> token_idx + head_idx + pack_idx
  const uint token_head_idx = global_idx / threads_per_head;
  const uint pack_idx = global_idx % threads_per_head;
  const uint token_idx = token_head_idx / num_heads;
  const uint head_idx = token_head_idx % num_heads;
  const uint pack_offset = pack_idx * pack_size;
  const uint head_offset = token_idx * num_heads * head_size + head_idx * head_size;

  float p_lse = prefix_lse[head_idx * num_tokens + token_idx];
  float s_lse = suffix_lse[head_idx * num_tokens + token_idx];
  p_lse = std::isinf(p_lse) ? -INFINITY : p_lse;
  s_lse = std::isinf(s_lse) ? -INFINITY : s_lse;
  const float max_lse = fmaxf(p_lse, s_lse);
  p_lse = p_lse - max_lse;
  s_lse = s_lse - max_lse;
  const float p_se = expf(p_lse);
  const float s_se = expf(s_lse);
  const float out_se = p_se + s_se;
  const float p_scale = p_se / out_se;
  const float s_scale = s_se / out_se;

  if (pack_offset < head_size) {
    const pack_128b_t p_pack = reinterpret_cast<const pack_128b_t*>(prefix_output + head_offset)[pack_idx];
    const pack_128b_t s_pack = reinterpret_cast<const pack_128b_t*>(suffix_output + head_offset)[pack_idx];
    pack_128b_t o_pack;
#pragma unroll
    for (uint i = 0; i < pack_size; ++i) {
      const float p = __half2float(reinterpret_cast<const scalar_t*>(&p_pack)[i]);
      const float s = __half2float(reinterpret_cast<const scalar_t*>(&s_pack)[i]);
      reinterpret_cast<scalar_t*>(&o_pack)[i] = __float2half(p * p_scale + s * s_scale);
    }
    reinterpret_cast<pack_128b_t*>(output + head_offset)[pack_idx] = o_pack;
  }
  if (output_lse != nullptr && pack_idx == 0) {
    output_lse[head_idx * num_tokens + token_idx] = logf(out_se) + max_lse;
  }
}

}  // namespace attn

void merge_attn_states(__half* output, float* output_lse, const __half* prefix_output, const float* prefix_lse,
                       const __half* suffix_output, const float* suffix_lse, uint num_tokens, uint num_heads,
                       uint head_size, cudaStream_t stream) {
  constexpr uint NUM_THREADS = 128;
  const uint pack_size = 16 / sizeof(__half);
  const uint threads_per_head = head_size / pack_size;
  const uint total_threads = num_tokens * num_heads * threads_per_head;
  dim3 block(NUM_THREADS);
  dim3 grid((total_threads + NUM_THREADS - 1) / NUM_THREADS);
  attn::merge_attn_states_kernel<__half, NUM_THREADS><<<grid, block, 0, stream>>>(
      output, output_lse, prefix_output, prefix_lse, suffix_output, suffix_lse, num_tokens, num_heads, head_size);
}
