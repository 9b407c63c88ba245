// Row-wise L2 normalization (fp32), y = x / max(||x||_2, eps) as torch.nn.functional.normalize does it (embedding
// models): one row per block of 256 threads, a shared-memory tree reduction, the row read twice from global memory.
#include <cuda_runtime.h>

/* kerntune:
args  = ["x: in f32[rows * dim]", "y: out f32[rows * dim]", "dim: i32 = dim", "eps: f32 = 1e-12"]
sizes = [{ rows = 8192, dim = 4096 }, { rows = 32, dim = 4096 }, { rows = 1001, dim = 3585 }]
grid  = "rows"
block = "256"
*/
__global__ void l2_normalize_kernel(const float* x, float* y, int dim, float eps) {
  __shared__ float red[256];
  const float* xr = x + (long long)blockIdx.x * dim;
  float* yr = y + (long long)blockIdx.x * dim;
  float s = 0.f;
  for (int i = threadIdx.x; i < dim; i += 256) s += xr[i] * xr[i];
  red[threadIdx.x] = s;
  __syncthreads();
  for (int k = 128; k > 0; k >>= 1) {
    if (threadIdx.x < k) red[threadIdx.x] += red[threadIdx.x + k];
    __syncthreads();
  }
  const float inv = 1.0f / fmaxf(sqrtf(red[0]), eps);
  for (int i = threadIdx.x; i < dim; i += 256) yr[i] = xr[i] * inv;
}

void l2_normalize(const float* x, float* y, int rows, int dim, float eps, cudaStream_t stream) {
  l2_normalize_kernel<<<rows, 256, 0, stream>>>(x, y, dim, eps);
}
