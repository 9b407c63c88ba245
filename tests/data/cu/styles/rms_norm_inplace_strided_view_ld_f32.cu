// RMSNorm in place over a strided view, fp32: rows `ld` elements apart of which the first `n` are normalized (the
// q / k part of a fused projection's rows, say) and the rest left as they are; one block of 256 threads a row, a
// shared-memory tree for the sum of squares, rsqrtf(mean + eps), the weight multiplied in fp32.
#include <cuda_runtime.h>

/* kerntune:
args  = ["x: inout f32[rows * ld]", "weight: in f32[n]", "rows: i32 = rows", "n: i32 = n", "ld: i32 = ld",
         "eps: f32 = 1e-5"]
sizes = [{ rows = 1024, n = 1024, ld = 1536 }, { rows = 6, n = 320, ld = 392 }]
grid  = "rows"
block = "256"
*/
__global__ void rms_norm_view_inplace(float* x, const float* __restrict__ weight, int rows, int n, int ld, float eps) {
  __shared__ float red[256];
  float* row = x + (size_t)blockIdx.x * ld;
  float ss = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) ss += row[i] * row[i];
  red[threadIdx.x] = ss;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  const float inv = rsqrtf(red[0] / n + eps);
  for (int i = threadIdx.x; i < n; i += blockDim.x) row[i] = row[i] * inv * weight[i];
}
