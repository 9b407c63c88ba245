// Fused residual add + RMSNorm (bf16), vLLM semantics: residual <- x + residual, x <- rmsnorm(residual) * weight.
// Written the way it starts out: 256 threads per row, scalar loads, a shared-memory tree reduction, the sum
// stored to `residual` and read back from global memory in a second pass.
#include <cuda_bf16.h>

/* kerntune:
args  = ["x: inout bf16[tokens * hidden]", "residual: inout bf16[tokens * hidden]", "weight: in bf16[hidden]",
         "eps: f32 = 1e-6", "hidden: i32 = hidden"]
sizes = [{ tokens = 4096, hidden = 4096 }, { tokens = 8192, hidden = 8192 }, { tokens = 64, hidden = 14336 },
         { tokens = 1000, hidden = 5120 }, { tokens = 257, hidden = 4100 }]
grid  = "tokens"
block = "256"
*/
__global__ void fused_add_rms_norm_kernel(__nv_bfloat16* x, __nv_bfloat16* residual, const __nv_bfloat16* weight,
                                          float eps, int hidden) {
  __shared__ float red[256];
  const long long base = (long long)blockIdx.x * hidden;
  float ss = 0.f;
  for (int i = threadIdx.x; i < hidden; i += 256) {
    const __nv_bfloat16 z = __float2bfloat16(__bfloat162float(x[base + i]) + __bfloat162float(residual[base + i]));
    residual[base + i] = z;
    const float f = __bfloat162float(z);
    ss += f * f;
  }
  red[threadIdx.x] = ss;
  __syncthreads();
  for (int s = 128; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  const float inv = rsqrtf(red[0] / (float)hidden + eps);
  for (int i = threadIdx.x; i < hidden; i += 256) {
    const float f = __bfloat162float(residual[base + i]);
    const __nv_bfloat16 n = __float2bfloat16(f * inv);
    x[base + i] = __float2bfloat16(__bfloat162float(n) * __bfloat162float(weight[i]));
  }
}

void fused_add_rms_norm(__nv_bfloat16* x, __nv_bfloat16* residual, const __nv_bfloat16* weight, float eps,
                        int tokens, int hidden, cudaStream_t stream) {
  fused_add_rms_norm_kernel<<<tokens, 256, 0, stream>>>(x, residual, weight, eps, hidden);
}
