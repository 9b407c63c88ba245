// Split-KV combine of two partial attention results that carry their softmax statistics the way a FlashAttention
// forward loop keeps them, as a running row max m and a running sum of exponentials l (not folded into one lse):
// o_a, o_b fp16 [num_tokens, num_heads, head_dim], each already normalized by its own l (o = acc / l), and
// m_a, l_a, m_b, l_b fp32 [num_tokens, num_heads]. The merge rescales both sums to the common max,
//   m = max(m_a, m_b), wa = l_a * exp(m_a - m), wb = l_b * exp(m_b - m),
//   out = (o_a * wa + o_b * wb) / (wa + wb), m_out = m, l_out = wa + wb,
// so that the merged state can be merged again. The exponentials are taken as exp2f((x - m) * log2(e)) as the
// FlashAttention kernels do; a split that saw no key has m = -inf and l = 0 (the max is replaced by 0 when both are
// -inf, so the weights are 0 and the output 0, not NaN). A 2-D grid (num_tokens, num_heads), one block per
// (token, head) state with one thread per element of the head (block = head_dim); thread 0 computes the two
// output scales wa / (wa + wb) and wb / (wa + wb), writes m_out and l_out and hands the scales to the block through
// shared memory. Scalar fp16 loads, fp32 math, one rounding at the store.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>
#include <cmath>

namespace flash {

constexpr float kLog2e = 1.4426950408889634f;

/* kerntune:
args  = ["o_a: in f16[num_tokens * num_heads * head_dim]",
         "m_a: in f32[num_tokens * num_heads] ~ uniform(-4, 12)",
         "l_a: in f32[num_tokens * num_heads] ~ uniform(1, 100)",
         "o_b: in f16[num_tokens * num_heads * head_dim]",
         "m_b: in f32[num_tokens * num_heads] ~ uniform(-4, 12)",
         "l_b: in f32[num_tokens * num_heads] ~ uniform(1, 100)",
         "out: out f16[num_tokens * num_heads * head_dim]", "m_out: out f32[num_tokens * num_heads]",
         "l_out: out f32[num_tokens * num_heads]", "num_heads: i32 = num_heads", "head_dim: i32 = head_dim"]
sizes = [{ num_tokens = 4096, num_heads = 32, head_dim = 128 },
         { num_tokens = 4, num_heads = 64, head_dim = 128 },
         { num_tokens = 777, num_heads = 13, head_dim = 80 }]
grid  = ["num_tokens", "num_heads"]
block = "head_dim"
*/
__global__ void combine_max_sumexp_kernel(const __half* __restrict__ o_a, const float* __restrict__ m_a,
                                          const float* __restrict__ l_a, const __half* __restrict__ o_b,
                                          const float* __restrict__ m_b, const float* __restrict__ l_b,
                                          __half* __restrict__ out, float* __restrict__ m_out,
                                          float* __restrict__ l_out, const int num_heads, const int head_dim) {
  const int token = blockIdx.x;
  const int head = blockIdx.y;
  const int d = threadIdx.x;
  const int64_t state = (int64_t)token * num_heads + head;

  __shared__ float s_scale[2];  // the output scales of o_a and o_b

  if (d == 0) {
    const float row_max_a = m_a[state];
    const float row_max_b = m_b[state];
    const float row_max = fmaxf(row_max_a, row_max_b);
    const float max_safe = row_max == -INFINITY ? 0.f : row_max;  // both splits empty: weights 0, not NaN
    const float wa = l_a[state] * exp2f((row_max_a - max_safe) * kLog2e);
    const float wb = l_b[state] * exp2f((row_max_b - max_safe) * kLog2e);
    const float row_sum = wa + wb;
    const float inv_sum = row_sum > 0.f ? 1.f / row_sum : 0.f;
    s_scale[0] = wa * inv_sum;
    s_scale[1] = wb * inv_sum;
    m_out[state] = row_max;
    l_out[state] = row_sum;
  }
  __syncthreads();

  if (d < head_dim) {
    const int64_t idx = state * head_dim + d;
    const float a = __half2float(o_a[idx]);
    const float b = __half2float(o_b[idx]);
    out[idx] = __float2half(a * s_scale[0] + b * s_scale[1]);
  }
}

}  // namespace flash

// o_a, o_b, out: [num_tokens, num_heads, head_dim] fp16; m_a, l_a, m_b, l_b, m_out, l_out: [num_tokens, num_heads]
// fp32 (the running max of the scores and the sum of exp(score - max)). All pointers on the device.
void combine_max_sumexp(const __half* o_a, const float* m_a, const float* l_a, const __half* o_b, const float* m_b,
                        const float* l_b, __half* out, float* m_out, float* l_out, int num_tokens, int num_heads,
                        int head_dim, cudaStream_t stream) {
  if (num_tokens == 0 || num_heads == 0 || head_dim == 0 || head_dim > 1024) return;  // a thread per element
  dim3 grid(num_tokens, num_heads);
  dim3 block(head_dim);
  flash::combine_max_sumexp_kernel<<<grid, block, 0, stream>>>(o_a, m_a, l_a, o_b, m_b, l_b, out, m_out, l_out,
                                                               num_heads, head_dim);
}
