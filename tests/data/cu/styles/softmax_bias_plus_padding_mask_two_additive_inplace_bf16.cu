// Style kernel: attention softmax over bf16 scores [batch, heads, q, k] in place, the logit scaled, then a learned
// position bias [heads, q, k] (shared by the batch) and an additive key-padding mask [batch, k] (0 / -1e4, shared by
// every head and query of its sequence) added, both fp32; a block of 128 threads a row, a shared-memory max and sum.
#include <cuda_bf16.h>

/* kerntune:
args  = ["scores: inout bf16[B * H * Q * K]", "pos_bias: in f32[H * Q * K]", "pad: in f32[B * K] ~ uniform(-10000, 0)",
         "heads: i32 = H", "q_len: i32 = Q", "k_len: i32 = K", "scale: f32 = 0.125"]
sizes = [{ B = 8, H = 16, Q = 512, K = 512 }, { B = 2, H = 8, Q = 1, K = 4096 }, { B = 3, H = 12, Q = 77, K = 77 }]
grid  = "B * H * Q"
block = 128
atol  = 1e-6
*/
__global__ void biased_padded_softmax(__nv_bfloat16* scores, const float* pos_bias, const float* pad, int heads,
                                      int q_len, int k_len, float scale) {
  __shared__ float red[128];
  const long long row = blockIdx.x;  // ((b * heads + h) * q_len + q)
  const int b = (int)(row / ((long long)heads * q_len));
  const int hq = (int)(row % ((long long)heads * q_len));  // h * q_len + q
  __nv_bfloat16* s = scores + row * k_len;
  const float* pb = pos_bias + (long long)hq * k_len;
  const float* pm = pad + (long long)b * k_len;
  float mx = -INFINITY;
  for (int k = threadIdx.x; k < k_len; k += blockDim.x) mx = fmaxf(mx, __bfloat162float(s[k]) * scale + pb[k] + pm[k]);
  red[threadIdx.x] = mx;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + w]);
    __syncthreads();
  }
  mx = red[0];
  __syncthreads();
  float sum = 0.f;
  for (int k = threadIdx.x; k < k_len; k += blockDim.x) sum += expf(__bfloat162float(s[k]) * scale + pb[k] + pm[k] - mx);
  red[threadIdx.x] = sum;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) red[threadIdx.x] += red[threadIdx.x + w];
    __syncthreads();
  }
  const float inv = 1.f / red[0];
  for (int k = threadIdx.x; k < k_len; k += blockDim.x)
    s[k] = __float2bfloat16(expf(__bfloat162float(s[k]) * scale + pb[k] + pm[k] - mx) * inv);
}

void biased_padded_softmax_launch(__nv_bfloat16* scores, const float* pos_bias, const float* pad, int B, int H, int Q,
                                  int K, float scale, cudaStream_t stream) {
  biased_padded_softmax<<<B * H * Q, 128, 0, stream>>>(scores, pos_bias, pad, H, Q, K, scale);
}
