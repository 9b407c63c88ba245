// Style kernel: LayerNorm of a residual sum, fp32: h = x + residual + bias stored back into the residual stream,
// then LayerNorm(h) * gamma + beta into out. The block's mean and inverse deviation are taken with the fast
// division (__fdividef(sum, n)) by thread 0 into a shared stats array, the row centred in registers by `-=`
// (FasterTransformer-derived code's way). A block per row, two rows' worth of elements a thread at most.
#define MAX_ITEMS 4

__device__ float block_sum(float v, float* red) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = threadIdx.x < (blockDim.x >> 5) ? red[lane] : 0.f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  return v;
}

/* kerntune:
args  = ["out: out f32[tokens * hidden]", "residual: inout f32[tokens * hidden]", "x: in f32[tokens * hidden]",
         "bias: in f32[hidden]", "gamma: in f32[hidden]", "beta: in f32[hidden]", "n: i32 = hidden"]
sizes = [{ tokens = 2048, hidden = 4096 }, { tokens = 3, hidden = 1024 }, { tokens = 97, hidden = 2560 }]
grid  = "tokens"
block = 1024
*/
__global__ void add_bias_residual_layernorm(float* out, float* residual, const float* x, const float* bias,
                                            const float* gamma, const float* beta, int n) {
  __shared__ float red[32];
  __shared__ float stats[2];
  const long long base = (long long)blockIdx.x * n;
  float h[MAX_ITEMS];
  float sum = 0.f;
#pragma unroll
  for (int it = 0; it < MAX_ITEMS; ++it) {
    const int c = it * blockDim.x + threadIdx.x;
    h[it] = 0.f;
    if (c < n) {
      h[it] = x[base + c] + residual[base + c] + bias[c];
      residual[base + c] = h[it];
      sum += h[it];
    }
  }
  sum = block_sum(sum, red);
  if (threadIdx.x == 0) stats[0] = __fdividef(sum, (float)n);
  __syncthreads();
  float sq = 0.f;
#pragma unroll
  for (int it = 0; it < MAX_ITEMS; ++it) {
    const int c = it * blockDim.x + threadIdx.x;
    if (c < n) {
      h[it] -= stats[0];
      sq += h[it] * h[it];
    }
  }
  sq = block_sum(sq, red);
  if (threadIdx.x == 0) stats[1] = rsqrtf(__fdividef(sq, (float)n) + 1e-5f);
  __syncthreads();
#pragma unroll
  for (int it = 0; it < MAX_ITEMS; ++it) {
    const int c = it * blockDim.x + threadIdx.x;
    if (c < n) out[base + c] = h[it] * stats[1] * gamma[c] + beta[c];
  }
}

void add_bias_residual_layernorm_launch(float* out, float* residual, const float* x, const float* bias,
                                        const float* gamma, const float* beta, int tokens, int hidden,
                                        cudaStream_t stream) {
  add_bias_residual_layernorm<<<tokens, 1024, 0, stream>>>(out, residual, x, bias, gamma, beta, hidden);
}
