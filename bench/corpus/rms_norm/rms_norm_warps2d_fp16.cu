// RMSNorm (fp16) in the style of FlashInfer's include/flashinfer/norm.cuh: a 2-D block of (32, num_warps) threads
// per row, row strides and a weight_bias argument (0 for RMSNorm, 1 for Gemma's (1 + w)), warp-shuffle reductions
// combined through dynamic shared memory of num_warps floats, everything in fp32 until the single cast at the store.
// Kept scalar (FlashInfer vectorizes); the host side is a template instantiated for __half.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <algorithm>
#include <cstdint>

namespace infer {
namespace norm {

template <typename T>
__host__ __device__ __forceinline__ T ceil_div(T a, T b) {
  return (a + b - 1) / b;
}

/* kerntune:
args  = ["input: in f16[batch_size * d]", "weight: in f16[d]", "output: out f16[batch_size * d]", "d: u32 = d",
         "stride_input: u32 = d", "stride_output: u32 = d", "weight_bias: f32 = 0.0", "eps: f32 = 1e-6"]
sizes = [{ batch_size = 8192, d = 4096 }, { batch_size = 16, d = 8192 }, { batch_size = 333, d = 5123 }]
grid  = "batch_size"
block = [32, "cdiv(min(1024, d), 32)"]
smem  = "cdiv(min(1024, d), 32) * 4"
*/
template <typename T>
__global__ void RMSNormKernel(T* __restrict__ input, T* __restrict__ weight, T* __restrict__ output,
                              const uint32_t d, const uint32_t stride_input, const uint32_t stride_output,
                              float weight_bias, float eps) {
  const uint32_t bx = blockIdx.x;
  const uint32_t tx = threadIdx.x, ty = threadIdx.y;
  constexpr uint32_t warp_size = 32;
  const uint32_t num_warps = blockDim.y;
  const uint32_t thread_id = tx + ty * warp_size;
  const uint32_t num_threads = num_warps * warp_size;
  extern __shared__ float smem[];

  const T* row_in = input + (size_t)bx * stride_input;
  T* row_out = output + (size_t)bx * stride_output;

  float sum_sq = 0.f;
  for (uint32_t i = thread_id; i < d; i += num_threads) {
    const float v = float(row_in[i]);
    sum_sq += v * v;
  }
#pragma unroll
  for (uint32_t offset = warp_size / 2; offset > 0; offset /= 2) {
    sum_sq += __shfl_xor_sync(0xffffffff, sum_sq, offset);
  }
  if (tx == 0) smem[ty] = sum_sq;
  __syncthreads();
  if (ty == 0) {
    sum_sq = (tx < num_warps) ? smem[tx] : 0.f;
#pragma unroll
    for (uint32_t offset = warp_size / 2; offset > 0; offset /= 2) {
      sum_sq += __shfl_xor_sync(0xffffffff, sum_sq, offset);
    }
    if (tx == 0) smem[0] = sum_sq;
  }
  __syncthreads();

  const float rms_rcp = rsqrtf(smem[0] / float(d) + eps);
  for (uint32_t i = thread_id; i < d; i += num_threads) {
    row_out[i] = T(float(row_in[i]) * rms_rcp * (weight_bias + float(weight[i])));
  }
}

template <typename T>
cudaError_t RMSNorm(T* input, T* weight, T* output, uint32_t batch_size, uint32_t d, uint32_t stride_input,
                    uint32_t stride_output, float eps, float weight_bias, cudaStream_t stream) {
  const uint32_t block_size = std::min<uint32_t>(1024, d);
  const uint32_t num_warps = ceil_div(block_size, 32u);
  dim3 nblks(batch_size);
  dim3 nthrs(32, num_warps);
  const uint32_t smem_size = num_warps * sizeof(float);
  RMSNormKernel<T><<<nblks, nthrs, smem_size, stream>>>(input, weight, output, d, stride_input, stride_output,
                                                        weight_bias, eps);
  return cudaGetLastError();
}

template cudaError_t RMSNorm<__half>(__half*, __half*, __half*, uint32_t, uint32_t, uint32_t, uint32_t, float, float,
                                     cudaStream_t);

}  // namespace norm
}  // namespace infer
