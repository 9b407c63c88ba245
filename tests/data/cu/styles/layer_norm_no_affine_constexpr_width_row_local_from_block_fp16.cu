// LayerNorm without gamma or beta (fp16 in and out, fp32 statistics) over rows whose width is only a compile-time
// constant of the file (no size argument: `kWidth`), a block a row whose index is a local made of the block index
// (`row * kWidth + i`); two passes over the row (the mean, then the centred variance), warp shuffles then shared
// memory; eps inside the root.
#include <cuda_runtime.h>
#include <cuda_fp16.h>

namespace norm {
constexpr int kWidth = 768;
constexpr int kThreads = 256;
}  // namespace norm

__device__ __forceinline__ float block_sum(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  float t = 0.f;
  for (int w = 0; w < norm::kThreads / 32; ++w) t += scratch[w];
  __syncthreads();
  return t;
}

/* kerntune:
args  = ["x: in f16[rows * 768]", "y: out f16[rows * 768]", "eps: f32 = 1e-5"]
sizes = [{ rows = 65536 }, { rows = 2 }, { rows = 1001 }]
grid  = "rows"
block = 256
*/
__global__ void layer_norm_no_affine(const __half* __restrict__ x, __half* __restrict__ y, float eps) {
  __shared__ float scratch[norm::kThreads / 32];
  const long long row = blockIdx.x;
  float s = 0.f;
  for (int i = threadIdx.x; i < norm::kWidth; i += norm::kThreads) s += __half2float(x[row * norm::kWidth + i]);
  const float mean = block_sum(s, scratch) / norm::kWidth;
  float v = 0.f;
  for (int i = threadIdx.x; i < norm::kWidth; i += norm::kThreads) {
    const float d = __half2float(x[row * norm::kWidth + i]) - mean;
    v += d * d;
  }
  const float inv = rsqrtf(block_sum(v, scratch) / norm::kWidth + eps);
  for (int i = threadIdx.x; i < norm::kWidth; i += norm::kThreads)
    y[row * norm::kWidth + i] = __float2half((__half2float(x[row * norm::kWidth + i]) - mean) * inv);
}

void layer_norm(const __half* x, __half* y, int rows, float eps, cudaStream_t stream) {
  layer_norm_no_affine<<<rows, norm::kThreads, 0, stream>>>(x, y, eps);
}
