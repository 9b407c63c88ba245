// RMSNorm as KernelBench poses it (ScalingIntelligence/KernelBench, KernelBench/level1/36_RMSNorm_.py: Model with
// num_features and eps = 1e-5, forward rms = torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + eps); x / rms),
// written as the CUDA kernel a KernelBench solution (load_inline extension) starts as. fp32, input [batch, features,
// dim1, dim2] and the normalization over dim 1, the FEATURE (channel) axis of an NCHW tensor, not the last one: the
// features of one pixel are dim1 * dim2 apart. No weight. One thread per (batch, pixel) pair over a flat index,
// 256 threads per block, grid ceil(batch * dim1 * dim2 / 256): neighbouring threads read neighbouring pixels
// (coalesced) while each loops over the features twice (sum of squares, then the outputs). Rounding as the torch
// expression: mean = sum / features, rms = sqrtf(mean + eps), y = x / rms (a division, not a multiply by rsqrt).
// Argument order (x, out, batch_size, num_features, dim1, dim2, eps). Not the LLM layout: it is the progressive-GAN
// PixelNorm that KernelBench names RMSNorm. No bug found. Sizes: KernelBench's 16 x 64 x 256 x 256; 2 x 64 x 8 x 8;
// 3 x 37 x 61 x 59.
#include <cuda_runtime.h>
#include <cstdint>

/* kerntune:
args  = ["x: in f32[B * F * H * W]", "out: out f32[B * F * H * W]", "batch_size: i32 = B", "num_features: i32 = F",
         "dim1: i32 = H", "dim2: i32 = W", "eps: f32 = 1e-5"]
sizes = [{ B = 16, F = 64, H = 256, W = 256 }, { B = 2, F = 64, H = 8, W = 8 }, { B = 3, F = 37, H = 61, W = 59 }]
grid  = ["cdiv(B * H * W, 256)", 1, 1]
block = 256
*/
__global__ void rms_norm_kernel(const float* __restrict__ x, float* __restrict__ out, const int batch_size,
                                const int num_features, const int dim1, const int dim2, const float eps) {
  const int64_t spatial = (int64_t)dim1 * dim2;
  const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= (int64_t)batch_size * spatial) return;

  const int64_t b = idx / spatial;
  const int64_t s = idx % spatial;
  const int64_t offset = b * num_features * spatial + s;

  float sum = 0.0f;
  for (int f = 0; f < num_features; ++f) {
    const float v = x[offset + f * spatial];
    sum += v * v;
  }
  const float rms = sqrtf(sum / num_features + eps);

  for (int f = 0; f < num_features; ++f) {
    out[offset + f * spatial] = x[offset + f * spatial] / rms;
  }
}

// x, out: [batch_size, num_features, dim1, dim2] fp32, device pointers.
void rms_norm_cuda(const float* x, float* out, int batch_size, int num_features, int dim1, int dim2, float eps,
                   cudaStream_t stream) {
  const int64_t total = (int64_t)batch_size * dim1 * dim2;
  const int block_size = 256;
  const int num_blocks = (int)((total + block_size - 1) / block_size);
  rms_norm_kernel<<<num_blocks, block_size, 0, stream>>>(x, out, batch_size, num_features, dim1, dim2, eps);
}
