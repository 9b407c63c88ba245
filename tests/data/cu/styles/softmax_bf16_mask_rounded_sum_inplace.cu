// Eager attention in a bf16 model whose mask is bf16 too (Hugging Face builds it in the model's dtype): in place,
// scores [batch * heads, q_len, k_len] bf16, `attn_weights * scaling` rounded to bf16, then `+ causal_mask` as a
// bf16 add (the sum rounded to bf16 again), the mask [q_len, k_len] shared by every batch and head, softmax in fp32.
// One block per row through a shared-memory tree.
#include <cuda_bf16.h>
/* kerntune:
args  = ["w: inout bf16[bh * q_len * k_len]", "causal_mask: in bf16[q_len * k_len] ~ uniform(-6, 0)",
         "scaling: f32 = 0.0883883", "q_len: i32 = q_len", "k_len: i32 = k_len"]
sizes = [{ bh = 32, q_len = 128, k_len = 128 }, { bh = 6, q_len = 17, k_len = 300 }]
grid  = "bh * q_len"
block = "256"
atol  = 1e-5
*/
__global__ void attn_probs_bf16_mask(__nv_bfloat16* w, const __nv_bfloat16* causal_mask, float scaling, int q_len,
                                     int k_len) {
  __shared__ float red[256];
  const long long row = blockIdx.x;
  const __nv_bfloat16* mrow = causal_mask + (row % q_len) * k_len;
  __nv_bfloat16* x = w + row * k_len;
  float mx = -INFINITY;
  for (int k = threadIdx.x; k < k_len; k += 256) {
    const __nv_bfloat16 a = __hadd(__float2bfloat16(__bfloat162float(x[k]) * scaling), mrow[k]);
    mx = fmaxf(mx, __bfloat162float(a));
  }
  red[threadIdx.x] = mx;
  __syncthreads();
  for (int s = 128; s; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  mx = red[0];
  __syncthreads();
  float sum = 0.f;
  for (int k = threadIdx.x; k < k_len; k += 256) {
    const __nv_bfloat16 a = __hadd(__float2bfloat16(__bfloat162float(x[k]) * scaling), mrow[k]);
    sum += expf(__bfloat162float(a) - mx);
  }
  red[threadIdx.x] = sum;
  __syncthreads();
  for (int s = 128; s; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  const float inv = 1.f / red[0];
  for (int k = threadIdx.x; k < k_len; k += 256) {
    const __nv_bfloat16 a = __hadd(__float2bfloat16(__bfloat162float(x[k]) * scaling), mrow[k]);
    x[k] = __float2bfloat16(expf(__bfloat162float(a) - mx) * inv);
  }
}
