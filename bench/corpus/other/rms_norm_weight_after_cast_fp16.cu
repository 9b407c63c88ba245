// RMSNorm (fp16) with Hugging Face LlamaRMSNorm's order of operations: the statistics in fp32, the normalized row
// cast to fp16 first, and the weight applied after the cast with an fp16 multiply (weight * x.to(fp16)).
// One row per block of 1024 threads, a shared-memory tree reduction, two passes over the row in global memory.
#include <cuda_runtime.h>
#include <cuda_fp16.h>

/* kerntune:
args  = ["out: out f16[tokens * hidden]", "x: in f16[tokens * hidden]", "weight: in f16[hidden]",
         "hidden: i32 = hidden", "eps: f32 = 1e-6"]
sizes = [{ tokens = 8192, hidden = 4096 }, { tokens = 16, hidden = 14336 }, { tokens = 999, hidden = 5121 }]
grid  = "tokens"
block = "1024"
*/
__global__ void llama_rms_norm_kernel(__half* out, const __half* x, const __half* weight, int hidden, float eps) {
  __shared__ float red[1024];
  const long long base = (long long)blockIdx.x * hidden;
  float ss = 0.f;
  for (int i = threadIdx.x; i < hidden; i += 1024) {
    const float v = __half2float(x[base + i]);
    ss += v * v;
  }
  red[threadIdx.x] = ss;
  __syncthreads();
  for (int s = 512; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  const float inv = rsqrtf(red[0] / hidden + eps);
  for (int i = threadIdx.x; i < hidden; i += 1024) {
    const __half normed = __float2half(__half2float(x[base + i]) * inv);
    out[base + i] = __hmul(weight[i], normed);
  }
}

void llama_rms_norm(__half* out, const __half* x, const __half* weight, int tokens, int hidden, float eps,
                    cudaStream_t stream) {
  llama_rms_norm_kernel<<<tokens, 1024, 0, stream>>>(out, x, weight, hidden, eps);
}
