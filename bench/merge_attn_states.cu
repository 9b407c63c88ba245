// Merge two partial attention results (prefix and suffix, e.g. cascade / chunked-prefill attention) with their
// log-sum-exps, fp16 values and fp32 lse laid out [heads, tokens] as in vLLM/SGLang. Written the way it starts out:
// one thread per output element, scalar loads, the lse arithmetic recomputed by every thread.
#include <cuda_fp16.h>

/* kerntune:
args  = ["output: out f16[num_tokens * num_heads * head_size]", "output_lse: out f32[num_heads * num_tokens]",
         "prefix_output: in f16[num_tokens * num_heads * head_size]", "prefix_lse: in f32[num_heads * num_tokens]",
         "suffix_output: in f16[num_tokens * num_heads * head_size]", "suffix_lse: in f32[num_heads * num_tokens]",
         "num_tokens: i32 = num_tokens", "num_heads: i32 = num_heads", "head_size: i32 = head_size"]
sizes = [{ num_tokens = 8192, num_heads = 32, head_size = 128 }, { num_tokens = 2048, num_heads = 64, head_size = 128 },
         { num_tokens = 16, num_heads = 32, head_size = 128 }, { num_tokens = 1000, num_heads = 28, head_size = 100 }]
grid  = "cdiv(num_tokens * num_heads * head_size, 128)"
block = "128"
*/
__global__ void merge_attn_states_kernel(__half* output, float* output_lse, const __half* prefix_output,
                                         const float* prefix_lse, const __half* suffix_output, const float* suffix_lse,
                                         int num_tokens, int num_heads, int head_size) {
  const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long total = (long long)num_tokens * num_heads * head_size;
  if (idx >= total) return;
  const int token = idx / ((long long)num_heads * head_size);
  const int head = (idx / head_size) % num_heads;
  const int d = idx % head_size;
  float p_lse = prefix_lse[head * num_tokens + token];
  float s_lse = suffix_lse[head * num_tokens + token];
  p_lse = isinf(p_lse) ? -INFINITY : p_lse;
  s_lse = isinf(s_lse) ? -INFINITY : s_lse;
  const float max_lse = fmaxf(p_lse, s_lse);
  const float p_se = expf(p_lse - max_lse);
  const float s_se = expf(s_lse - max_lse);
  const float out_se = p_se + s_se;
  const float p_scale = p_se / out_se;
  const float s_scale = s_se / out_se;
  output[idx] = __float2half(__half2float(prefix_output[idx]) * p_scale + __half2float(suffix_output[idx]) * s_scale);
  if (d == 0) output_lse[head * num_tokens + token] = logf(out_se) + max_lse;
}

void merge_attn_states(__half* output, float* output_lse, const __half* prefix_output, const float* prefix_lse,
                       const __half* suffix_output, const float* suffix_lse, int num_tokens, int num_heads,
                       int head_size, cudaStream_t stream) {
  const long long total = (long long)num_tokens * num_heads * head_size;
  merge_attn_states_kernel<<<(total + 127) / 128, 128, 0, stream>>>(output, output_lse, prefix_output, prefix_lse,
                                                                     suffix_output, suffix_lse, num_tokens, num_heads,
                                                                     head_size);
}
