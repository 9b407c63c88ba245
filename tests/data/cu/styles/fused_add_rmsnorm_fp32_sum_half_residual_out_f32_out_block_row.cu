// Fused add + RMSNorm whose sum stays in fp32: h = x + residual is computed in fp32 and written rounded to a half
// residual output, while the fp32 h itself (recomputed from the inputs in the second pass, not read back from its
// rounded copy) is squared and normalized into an fp32 output (a norm feeding an fp32 projection); fp16 inputs, an
// fp32 weight; a block a row, a shared-memory tree over the warps' partial sums.
#include <cuda_runtime.h>
#include <cuda_fp16.h>

/* kerntune:
args  = ["x: in f16[rows * hidden]", "residual: in f16[rows * hidden]", "weight: in f32[hidden]",
         "residual_out: out f16[rows * hidden]", "out: out f32[rows * hidden]", "hidden: i32 = hidden",
         "eps: f32 = 1e-5"]
sizes = [{ rows = 8192, hidden = 4096 }, { rows = 3, hidden = 2048 }, { rows = 411, hidden = 1000 }]
grid  = "rows"
block = 256
*/
__global__ void add_rmsnorm_f32_sum(const __half* __restrict__ x, const __half* __restrict__ residual,
                                    const float* __restrict__ weight, __half* __restrict__ residual_out,
                                    float* __restrict__ out, int hidden, float eps) {
  __shared__ float warp_ss[8];
  const long long base = (long long)blockIdx.x * hidden;
  float ss = 0.f;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    const float h = __half2float(x[base + i]) + __half2float(residual[base + i]);
    residual_out[base + i] = __float2half(h);
    ss += h * h;
  }
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (threadIdx.x % 32 == 0) warp_ss[threadIdx.x / 32] = ss;
  __syncthreads();
  if (threadIdx.x < 32) {
    float v = threadIdx.x < blockDim.x / 32 ? warp_ss[threadIdx.x] : 0.f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x == 0) warp_ss[0] = v;
  }
  __syncthreads();
  const float inv = rsqrtf(warp_ss[0] / hidden + eps);
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    const float h = __half2float(x[base + i]) + __half2float(residual[base + i]);
    out[base + i] = h * inv * weight[i];
  }
}

void add_rmsnorm(const __half* x, const __half* residual, const float* weight, __half* residual_out, float* out,
                 int rows, int hidden, float eps, cudaStream_t stream) {
  add_rmsnorm_f32_sum<<<rows, 256, 0, stream>>>(x, residual, weight, residual_out, out, hidden, eps);
}
