// Merge of two partial attention results (a cached prefix and a new suffix, or two KV splits) with their
// natural-log LSEs, vLLM's prefix / suffix contract with the outputs first: output, output_lse, prefix_output,
// prefix_lse, suffix_output, suffix_lse; values bf16 [num_tokens, num_heads, head_size], LSEs fp32
// [num_tokens, num_heads]. Per (token, head) state:
//   m = max(p_lse, s_lse), p_se = exp(p_lse - m), s_se = exp(s_lse - m),
//   out = prefix * p_se / (p_se + s_se) + suffix * s_se / (p_se + s_se),  out_lse = log(p_se + s_se) + m
// An LSE of +inf (what some attention backends report for an empty split) is read as -inf; both -inf give a zero
// output and out_lse = -inf. output_lse may be null. A persistent launch: a warp per state, 8 warps per block of
// 256, the grid capped at 1024 blocks and each warp striding over the states by the grid's warp count. A lane
// merges 16-byte packs of 8 bf16 (uint4 loads, __nv_bfloat162 math in fp32, one rounding) when head_size is a
// multiple of 8, else single elements; lane 0 writes out_lse.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <algorithm>
#include <cstdint>
#include <cmath>

constexpr int kWarpSize = 32;
constexpr int kWarpsPerBlock = 8;
constexpr int kMergeThreads = kWarpsPerBlock * kWarpSize;
constexpr int kMaxMergeBlocks = 1024;
constexpr int kPackElems = 8;  // bf16 per uint4

/* kerntune:
args  = ["output: out bf16[num_tokens * num_heads * head_size]", "output_lse: out f32[num_tokens * num_heads]",
         "prefix_output: in bf16[num_tokens * num_heads * head_size]",
         "prefix_lse: in f32[num_tokens * num_heads] ~ uniform(-4, 12)",
         "suffix_output: in bf16[num_tokens * num_heads * head_size]",
         "suffix_lse: in f32[num_tokens * num_heads] ~ uniform(-4, 12)",
         "num_tokens: i32 = num_tokens", "num_heads: i32 = num_heads", "head_size: i32 = head_size"]
sizes = [{ num_tokens = 8192, num_heads = 32, head_size = 128 }, { num_tokens = 8, num_heads = 128, head_size = 512 },
         { num_tokens = 999, num_heads = 7, head_size = 80 }]
grid  = "min(cdiv(num_tokens * num_heads, 8), 1024)"
block = 256
*/
__global__ void merge_attn_states_persistent_kernel(__nv_bfloat16* __restrict__ output, float* __restrict__ output_lse,
                                                    const __nv_bfloat16* __restrict__ prefix_output,
                                                    const float* __restrict__ prefix_lse,
                                                    const __nv_bfloat16* __restrict__ suffix_output,
                                                    const float* __restrict__ suffix_lse, const int num_tokens,
                                                    const int num_heads, const int head_size) {
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t num_states = static_cast<int64_t>(num_tokens) * num_heads;
  const int64_t warp_stride = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;

  for (int64_t state = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp; state < num_states;
       state += warp_stride) {
    float p_lse = prefix_lse[state];
    float s_lse = suffix_lse[state];
    p_lse = isinf(p_lse) ? -INFINITY : p_lse;
    s_lse = isinf(s_lse) ? -INFINITY : s_lse;
    const float max_lse = fmaxf(p_lse, s_lse);
    float p_scale = 0.0f, s_scale = 0.0f, out_lse = -INFINITY;
    if (max_lse != -INFINITY) {
      const float p_se = expf(p_lse - max_lse);
      const float s_se = expf(s_lse - max_lse);
      const float out_se = p_se + s_se;
      p_scale = p_se / out_se;
      s_scale = s_se / out_se;
      out_lse = logf(out_se) + max_lse;
    }

    const int64_t base = state * head_size;
    if (head_size % kPackElems == 0) {
      const int num_packs = head_size / kPackElems;
      for (int pk = lane; pk < num_packs; pk += kWarpSize) {
        const int64_t off = base + static_cast<int64_t>(pk) * kPackElems;
        const uint4 pv = *reinterpret_cast<const uint4*>(prefix_output + off);
        const uint4 sv = *reinterpret_cast<const uint4*>(suffix_output + off);
        const __nv_bfloat162* p2 = reinterpret_cast<const __nv_bfloat162*>(&pv);
        const __nv_bfloat162* s2 = reinterpret_cast<const __nv_bfloat162*>(&sv);
        uint4 ov;
        __nv_bfloat162* o2 = reinterpret_cast<__nv_bfloat162*>(&ov);
#pragma unroll
        for (int j = 0; j < kPackElems / 2; ++j) {
          const float2 a = __bfloat1622float2(p2[j]);
          const float2 b = __bfloat1622float2(s2[j]);
          o2[j] = __floats2bfloat162_rn(a.x * p_scale + b.x * s_scale, a.y * p_scale + b.y * s_scale);
        }
        *reinterpret_cast<uint4*>(output + off) = ov;
      }
    } else {
      for (int d = lane; d < head_size; d += kWarpSize) {
        const float a = __bfloat162float(prefix_output[base + d]);
        const float b = __bfloat162float(suffix_output[base + d]);
        output[base + d] = __float2bfloat16(a * p_scale + b * s_scale);
      }
    }
    if (lane == 0 && output_lse != nullptr) output_lse[state] = out_lse;
  }
}

// output, prefix_output, suffix_output: [num_tokens, num_heads, head_size] bf16; output_lse (or null), prefix_lse,
// suffix_lse: [num_tokens, num_heads] fp32, natural log. Device pointers (16-byte aligned for the packed path).
void merge_attn_states_bf16(__nv_bfloat16* output, float* output_lse, const __nv_bfloat16* prefix_output,
                            const float* prefix_lse, const __nv_bfloat16* suffix_output, const float* suffix_lse,
                            int num_tokens, int num_heads, int head_size, cudaStream_t stream) {
  const int64_t num_states = static_cast<int64_t>(num_tokens) * num_heads;
  if (num_states == 0 || head_size == 0) return;
  const int64_t blocks_needed = (num_states + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const int grid = static_cast<int>(std::min<int64_t>(blocks_needed, kMaxMergeBlocks));
  merge_attn_states_persistent_kernel<<<grid, kMergeThreads, 0, stream>>>(
      output, output_lse, prefix_output, prefix_lse, suffix_output, suffix_lse, num_tokens, num_heads, head_size);
}
