// RMSNorm as it is usually first written: one row per block of 256 threads, scalar fp16 loads, a shared-memory
// tree reduction, and a second pass over the row in global memory to normalize.
#include <cuda_fp16.h>

#define RMS_BLOCK 256

/* kerntune:
args  = ["out: out f16[tokens * hidden]", "x: in f16[tokens * hidden]", "weight: in f16[hidden]",
         "eps: f32 = 1e-6", "hidden: i32 = hidden"]
sizes = [{ tokens = 4096, hidden = 4096 }, { tokens = 8192, hidden = 8192 }, { tokens = 16, hidden = 14336 },
         { tokens = 1000, hidden = 5120 }, { tokens = 333, hidden = 4099 }]
grid  = "tokens"
block = "256"
*/
__global__ void rms_norm_kernel(__half* out, const __half* x, const __half* weight, float eps, int hidden) {
  __shared__ float red[RMS_BLOCK];
  const int row = blockIdx.x;
  const int tid = threadIdx.x;
  float ss = 0.f;
  for (int i = tid; i < hidden; i += RMS_BLOCK) {
    const float v = __half2float(x[(long long)row * hidden + i]);
    ss += v * v;
  }
  red[tid] = ss;
  __syncthreads();
  for (int s = RMS_BLOCK / 2; s > 0; s >>= 1) {
    if (tid < s) red[tid] += red[tid + s];
    __syncthreads();
  }
  const float inv = rsqrtf(red[0] / (float)hidden + eps);
  for (int i = tid; i < hidden; i += RMS_BLOCK) {
    const float v = __half2float(x[(long long)row * hidden + i]);
    const __half n = __float2half(v * inv);
    out[(long long)row * hidden + i] = __float2half(__half2float(n) * __half2float(weight[i]));
  }
}

void rms_norm(__half* out, const __half* x, const __half* weight, float eps, int tokens, int hidden,
              cudaStream_t stream) {
  rms_norm_kernel<<<tokens, RMS_BLOCK, 0, stream>>>(out, x, weight, eps, hidden);
}
