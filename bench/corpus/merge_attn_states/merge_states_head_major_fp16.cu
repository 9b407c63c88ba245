// Merge of two partial attention states (a prefix and a suffix: cascade attention's shared-prefix and unique
// parts, or two KV splits of a decode step) whose partial outputs are laid out head-major, as split-KV decoders
// that run one head's tokens together leave them: v_a, v_b, v_out are [num_heads, num_tokens, head_dim] fp16 and
// the log-sum-exps s_a, s_b, s_out are [num_heads, num_tokens] fp32 natural log. The usual max-shifted merge in
// fp32: m = max(s_a, s_b), wa = exp(s_a - m), wb = exp(s_b - m), v = (v_a * wa + v_b * wb) / (wa + wb),
// s_out = m + log(wa + wb). A 2-D grid (num_tokens, num_heads) with blockIdx.x the token and blockIdx.y the head,
// a block of head_dim / 2 threads each loading, merging and storing one __half2 pair; thread 0 writes s_out.
// head_dim must be even (the host rejects an odd one).
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>

/* kerntune:
args  = ["v_a: in f16[num_heads * num_tokens * head_dim]", "s_a: in f32[num_heads * num_tokens] ~ uniform(-4, 12)",
         "v_b: in f16[num_heads * num_tokens * head_dim]", "s_b: in f32[num_heads * num_tokens] ~ uniform(-4, 12)",
         "v_out: out f16[num_heads * num_tokens * head_dim]", "s_out: out f32[num_heads * num_tokens]",
         "num_tokens: i32 = num_tokens", "head_dim: i32 = head_dim"]
sizes = [{ num_tokens = 8192, num_heads = 32, head_dim = 128 }, { num_tokens = 8, num_heads = 32, head_dim = 128 },
         { num_tokens = 1001, num_heads = 28, head_dim = 80 }]
grid  = ["num_tokens", "num_heads"]
block = "head_dim / 2"
*/
__global__ void merge_states_head_major_kernel(const __half* __restrict__ v_a, const float* __restrict__ s_a,
                                               const __half* __restrict__ v_b, const float* __restrict__ s_b,
                                               __half* __restrict__ v_out, float* __restrict__ s_out,
                                               const int num_tokens, const int head_dim) {
  const int token = blockIdx.x;
  const int head = blockIdx.y;
  const int pair = threadIdx.x;  // elements 2 * pair and 2 * pair + 1 of the head

  // one state per (head, token): the lse index, and the row of head_dim values that it weighs
  const int64_t state = (int64_t)head * num_tokens + token;

  const float lse_a = s_a[state];
  const float lse_b = s_b[state];
  const float m = fmaxf(lse_a, lse_b);
  const float wa = expf(lse_a - m);
  const float wb = expf(lse_b - m);
  const float w_sum = wa + wb;

  if (pair < head_dim / 2) {
    const int64_t row = state * head_dim;
    const __half2 a2 = reinterpret_cast<const __half2*>(v_a + row)[pair];
    const __half2 b2 = reinterpret_cast<const __half2*>(v_b + row)[pair];
    const float2 a = __half22float2(a2);
    const float2 b = __half22float2(b2);
    const float o_lo = (a.x * wa + b.x * wb) / w_sum;
    const float o_hi = (a.y * wa + b.y * wb) / w_sum;
    reinterpret_cast<__half2*>(v_out + row)[pair] = __floats2half2_rn(o_lo, o_hi);
  }

  if (pair == 0) {
    s_out[state] = m + logf(w_sum);
  }
}

// Partial outputs [num_heads, num_tokens, head_dim], lse [num_heads, num_tokens]; all pointers on the device.
cudaError_t merge_states_head_major(const __half* v_a, const float* s_a, const __half* v_b, const float* s_b,
                                    __half* v_out, float* s_out, int num_tokens, int num_heads, int head_dim,
                                    cudaStream_t stream) {
  if (head_dim % 2 != 0) return cudaErrorInvalidValue;  // one __half2 pair per thread
  const dim3 grid(num_tokens, num_heads);
  const dim3 block(head_dim / 2);
  merge_states_head_major_kernel<<<grid, block, 0, stream>>>(v_a, s_a, v_b, s_b, v_out, s_out, num_tokens,
                                                             head_dim);
  return cudaGetLastError();
}
