// final combine of two split-KV partials kept as (running max, sum of exponentials), vLLM paged-attention v2 /
// TensorRT-LLM multi-block style: bf16 values [tokens, heads, dim] each normalized by its own sum, fp32 maxima and
// sums [heads, tokens] (head-major), natural expf. The merged state is not written (the last merge), arguments
// grouped by kind (output, values, maxima, sums, sizes), one warp per (token, head), the exponential and the
// multiply by its sum in statements of their own
#include <cuda_bf16.h>
/* kerntune:
args  = ["out: out bf16[t * h * d]", "x1: in bf16[t * h * d]", "x2: in bf16[t * h * d]",
         "max1: in f32[h * t] ~ uniform(-8, 8)", "max2: in f32[h * t] ~ uniform(-8, 8)",
         "sum1: in f32[h * t] ~ uniform(1, 64)", "sum2: in f32[h * t] ~ uniform(1, 64)",
         "tokens: i32 = t", "heads: i32 = h", "dim: i32 = d"]
sizes = [{ t = 300, h = 8, d = 128 }, { t = 7, h = 5, d = 96 }]
grid  = ["cdiv(t * h, 4)"]
block = "128"
*/
__global__ void combine_partials(__nv_bfloat16* __restrict__ out, const __nv_bfloat16* __restrict__ x1,
                                 const __nv_bfloat16* __restrict__ x2, const float* __restrict__ max1,
                                 const float* __restrict__ max2, const float* __restrict__ sum1,
                                 const float* __restrict__ sum2, int tokens, int heads, int dim) {
  const int w = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
  if (w >= tokens * heads) return;
  const int token = w / heads, head = w - token * heads;
  const int st = head * tokens + token;
  const float a1 = max1[st], a2 = max2[st];
  const float mx = fmaxf(a1, a2);
  const float e1 = expf(a1 - mx), e2 = expf(a2 - mx);
  const float w1 = sum1[st] * e1;
  const float w2 = sum2[st] * e2;
  const float inv = 1.f / (w1 + w2);
  const float c1 = w1 * inv, c2 = w2 * inv;
  const long base = (long)w * dim;
  for (int i = lane; i < dim; i += 32)
    out[base + i] = __float2bfloat16(__bfloat162float(x1[base + i]) * c1 + __bfloat162float(x2[base + i]) * c2);
}

void combine(__nv_bfloat16* out, const __nv_bfloat16* x1, const __nv_bfloat16* x2, const float* max1,
             const float* max2, const float* sum1, const float* sum2, int tokens, int heads, int dim,
             cudaStream_t stream) {
  combine_partials<<<(tokens * heads + 3) / 4, 128, 0, stream>>>(out, x1, x2, max1, max2, sum1, sum2, tokens, heads,
                                                                 dim);
}
