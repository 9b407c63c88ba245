// Fused residual add + RMSNorm (bf16) in the style of FlashInfer's FusedAddRMSNormKernel: a (32, num_warps) block
// per row, the fp32 sum x + residual kept in dynamic shared memory (after a num_warps slot area rounded up to 4
// floats), residual gets the sum rounded to bf16 but the normalization uses the unrounded fp32 sum; row strides
// and a weight_bias argument. Kept scalar; the host side is a template instantiated for __nv_bfloat16.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <algorithm>
#include <cstdint>

namespace infer {
namespace norm {

template <typename T>
__host__ __device__ __forceinline__ T ceil_div(T a, T b) {
  return (a + b - 1) / b;
}

/* kerntune:
args  = ["input: inout bf16[batch_size * d]", "residual: inout bf16[batch_size * d]", "weight: in bf16[d]",
         "d: u32 = d", "stride_input: u32 = d", "stride_residual: u32 = d", "weight_bias: f32 = 0.0",
         "eps: f32 = 1e-6"]
sizes = [{ batch_size = 8192, d = 4096 }, { batch_size = 32, d = 8192 }, { batch_size = 1001, d = 3583 }]
grid  = "batch_size"
block = [32, "cdiv(min(1024, d), 32)"]
smem  = "(cdiv(cdiv(min(1024, d), 32), 4) * 4 + d) * 4"
*/
template <typename T>
__global__ void FusedAddRMSNormKernel(T* __restrict__ input, T* __restrict__ residual, T* __restrict__ weight,
                                      const uint32_t d, const uint32_t stride_input, const uint32_t stride_residual,
                                      float weight_bias, float eps) {
  const uint32_t bx = blockIdx.x;
  const uint32_t tx = threadIdx.x, ty = threadIdx.y;
  constexpr uint32_t warp_size = 32;
  const uint32_t num_warps = blockDim.y;
  const uint32_t thread_id = tx + ty * warp_size;
  const uint32_t num_threads = num_warps * warp_size;
  extern __shared__ float smem[];
  float* smem_x = smem + ceil_div(num_warps, 4u) * 4;

  T* in_row = input + (size_t)bx * stride_input;
  T* res_row = residual + (size_t)bx * stride_residual;

  float sum_sq = 0.f;
  for (uint32_t i = thread_id; i < d; i += num_threads) {
    const float x = float(in_row[i]) + float(res_row[i]);
    res_row[i] = T(x);
    smem_x[i] = x;
    sum_sq += x * x;
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
    in_row[i] = T(smem_x[i] * rms_rcp * (weight_bias + float(weight[i])));
  }
}

template <typename T>
cudaError_t FusedAddRMSNorm(T* input, T* residual, T* weight, uint32_t batch_size, uint32_t d,
                            uint32_t stride_input, uint32_t stride_residual, float eps, float weight_bias,
                            cudaStream_t stream) {
  const uint32_t block_size = std::min<uint32_t>(1024, d);
  const uint32_t num_warps = ceil_div(block_size, 32u);
  dim3 nblks(batch_size);
  dim3 nthrs(32, num_warps);
  const uint32_t smem_size = (ceil_div(num_warps, 4u) * 4 + d) * sizeof(float);
  cudaError_t err = cudaFuncSetAttribute(FusedAddRMSNormKernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         smem_size);
  if (err != cudaSuccess) return err;
  FusedAddRMSNormKernel<T><<<nblks, nthrs, smem_size, stream>>>(input, residual, weight, d, stride_input,
                                                                stride_residual, weight_bias, eps);
  return cudaGetLastError();
}

template cudaError_t FusedAddRMSNorm<__nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, uint32_t,
                                                    uint32_t, uint32_t, uint32_t, float, float, cudaStream_t);

}  // namespace norm
}  // namespace infer
