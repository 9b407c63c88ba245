// RMSNorm (fp32) as in the original RMSNorm paper's reference code: x / (rms(x) + eps) * g, eps outside the square
// root. Written as a persistent grid-stride loop over rows (grid = min(rows, 1024), 512 threads per block given by
// a constexpr), shared-memory tree reduction, two passes over the row in global memory.
#include <cuda_runtime.h>
#include <algorithm>

constexpr int kThreads = 512;
constexpr int kMaxBlocks = 1024;

/* kerntune:
args  = ["out: out f32[rows * dim]", "in: in f32[rows * dim]", "scale: in f32[dim]", "rows: i32 = rows",
         "dim: i32 = dim", "eps: f32 = 1e-8"]
sizes = [{ rows = 4096, dim = 4096 }, { rows = 24, dim = 12288 }, { rows = 2049, dim = 3001 }]
grid  = "min(rows, 1024)"
block = "512"
*/
__global__ void rmsnorm_eps_outside_kernel(float* out, const float* in, const float* scale, int rows, int dim,
                                           float eps) {
  __shared__ float partial[kThreads];
  for (int row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* x = in + (long long)row * dim;
    float* y = out + (long long)row * dim;
    float s = 0.f;
    for (int i = threadIdx.x; i < dim; i += kThreads) s += x[i] * x[i];
    partial[threadIdx.x] = s;
    __syncthreads();
    for (int step = kThreads / 2; step > 0; step >>= 1) {
      if (threadIdx.x < step) partial[threadIdx.x] += partial[threadIdx.x + step];
      __syncthreads();
    }
    const float rms = sqrtf(partial[0] / dim);
    __syncthreads();  // everyone has read partial[0] before the next row overwrites it
    const float inv = 1.0f / (rms + eps);
    for (int i = threadIdx.x; i < dim; i += kThreads) y[i] = x[i] * inv * scale[i];
  }
}

void rmsnorm_eps_outside(float* out, const float* in, const float* scale, int rows, int dim, float eps,
                         cudaStream_t stream) {
  const int blocks = std::min(rows, kMaxBlocks);
  rmsnorm_eps_outside_kernel<<<blocks, kThreads, 0, stream>>>(out, in, scale, rows, dim, eps);
}
