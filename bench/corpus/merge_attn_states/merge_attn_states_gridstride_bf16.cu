// Merge of prefix and suffix attention outputs (bf16, fp32 natural-log lse laid out [num_tokens, num_heads]) as in
// chunked-prefill MLA paths that do not need the merged lse: a grid-stride loop over every output element
// (64-bit indices), grid = min(ceil(total / 256), 65535), the lse arithmetic recomputed per element, +inf lse
// treated as -inf. No output lse.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <algorithm>
#include <cstdint>

/* kerntune:
args  = ["output: out bf16[num_tokens * num_heads * head_size]",
         "prefix_output: in bf16[num_tokens * num_heads * head_size]",
         "prefix_lse: in f32[num_tokens * num_heads] ~ uniform(-4, 12)",
         "suffix_output: in bf16[num_tokens * num_heads * head_size]",
         "suffix_lse: in f32[num_tokens * num_heads] ~ uniform(-4, 12)", "num_tokens: i64 = num_tokens",
         "num_heads: i32 = num_heads", "head_size: i32 = head_size"]
sizes = [{ num_tokens = 4096, num_heads = 128, head_size = 128 }, { num_tokens = 32, num_heads = 32, head_size = 128 },
         { num_tokens = 999, num_heads = 28, head_size = 128 }]
grid  = "min(cdiv(num_tokens * num_heads * head_size, 256), 65535)"
block = "256"
*/
__global__ void merge_attn_states_gridstride(__nv_bfloat16* __restrict__ output,
                                             const __nv_bfloat16* __restrict__ prefix_output,
                                             const float* __restrict__ prefix_lse,
                                             const __nv_bfloat16* __restrict__ suffix_output,
                                             const float* __restrict__ suffix_lse, int64_t num_tokens, int num_heads,
                                             int head_size) {
  const int64_t total = num_tokens * num_heads * head_size;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t th = i / head_size;  // token * num_heads + head
    float p = prefix_lse[th];
    float s = suffix_lse[th];
    p = isinf(p) ? -INFINITY : p;
    s = isinf(s) ? -INFINITY : s;
    const float m = fmaxf(p, s);
    const float pe = expf(p - m);
    const float se = expf(s - m);
    const float v = __bfloat162float(prefix_output[i]) * pe + __bfloat162float(suffix_output[i]) * se;
    output[i] = __float2bfloat16(v / (pe + se));
  }
}

void merge_attn_states_no_lse(__nv_bfloat16* output, const __nv_bfloat16* prefix_output, const float* prefix_lse,
                              const __nv_bfloat16* suffix_output, const float* suffix_lse, int64_t num_tokens,
                              int num_heads, int head_size, cudaStream_t stream) {
  const int threads = 256;
  const int64_t total = num_tokens * num_heads * head_size;
  const int64_t blocks = std::min<int64_t>((total + threads - 1) / threads, 65535);
  merge_attn_states_gridstride<<<blocks, threads, 0, stream>>>(output, prefix_output, prefix_lse, suffix_output,
                                                               suffix_lse, num_tokens, num_heads, head_size);
}
