// Residual add + RMSNorm (bf16) in the style of TensorRT-LLM's generalRmsNorm with a residual: the argument order
// (normed_output, input, residual, gamma, eps, tokens, hidden_units), the residual stream updated in place
// (residual = bf16(residual + input), the add done in fp32 and rounded once) and the normalized row written to a
// separate normed_output. One token per block, block = min(hidden_units, 1024) rounded up to a whole warp by the
// host. The sum of squares goes through a blockReduceSum helper (an xor-shuffle warp reduction, one partial per
// warp in a static __shared__ float[32], then every warp reduces the partials) and thread 0 publishes
// rsqrt(mean + eps) through __shared__ float s_variance. No row is kept in registers: the second pass re-reads the
// updated residual from global memory (each thread reads back only the elements it wrote itself). fp32 math,
// normed_output = bf16(residual * s_variance * gamma), one rounding.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <algorithm>

namespace kernels {

static constexpr unsigned FINAL_MASK = 0xffffffffu;

template <typename T>
__inline__ __device__ T warpReduceSum(T val) {
#pragma unroll
  for (int mask = 16; mask > 0; mask >>= 1) val += __shfl_xor_sync(FINAL_MASK, val, mask, 32);
  return val;
}

// Sum over the block; every thread returns the total. The block must be a whole number of warps (the launcher
// rounds it up), at most 32 of them. Called once per kernel, so the partials are never overwritten while read.
template <typename T>
__inline__ __device__ T blockReduceSum(T val) {
  static __shared__ T shared[32];
  const int lane = threadIdx.x & 0x1f;
  const int wid = threadIdx.x >> 5;

  val = warpReduceSum<T>(val);
  if (lane == 0) shared[wid] = val;
  __syncthreads();

  val = (lane < static_cast<int>(blockDim.x >> 5)) ? shared[lane] : static_cast<T>(0.0f);
  val = warpReduceSum<T>(val);
  return val;
}

/* kerntune:
args  = ["normed_output: out bf16[tokens * hidden_units]", "input: in bf16[tokens * hidden_units]",
         "residual: inout bf16[tokens * hidden_units]", "gamma: in bf16[hidden_units]", "eps: f32 = 1e-6",
         "tokens: i32 = tokens", "hidden_units: i32 = hidden_units"]
sizes = [{ tokens = 8192, hidden_units = 4096 }, { tokens = 4, hidden_units = 8192 },
         { tokens = 1537, hidden_units = 3001 }]
grid  = "tokens"
block = "round_up(min(hidden_units, 1024), 32)"
*/
template <typename T>
__global__ void generalRmsNormResidual(T* normed_output, const T* input, T* residual, const T* gamma,
                                       const float eps, int tokens, int hidden_units) {
  const int tidx = threadIdx.x;
  const int bidx = blockIdx.x;
  const size_t offset = static_cast<size_t>(bidx) * hidden_units;

  __shared__ float s_variance;
  float local_var_sum = 0.0f;

  // residual += input (fp32 add, rounded to T); the sum of squares of the rounded values
  for (int i = tidx; i < hidden_units; i += blockDim.x) {
    const T updated = static_cast<T>(static_cast<float>(input[offset + i]) + static_cast<float>(residual[offset + i]));
    residual[offset + i] = updated;
    const float val = static_cast<float>(updated);
    local_var_sum += val * val;
  }

  const float variance = blockReduceSum<float>(local_var_sum);
  if (threadIdx.x == 0) {
    s_variance = rsqrtf(variance / static_cast<float>(hidden_units) + eps);
  }
  __syncthreads();

  // normed_output = residual * rsqrt(mean(residual^2) + eps) * gamma, residual re-read from global memory
  for (int i = tidx; i < hidden_units; i += blockDim.x) {
    const float val = static_cast<float>(residual[offset + i]);
    const float g = static_cast<float>(gamma[i]);
    normed_output[offset + i] = static_cast<T>(val * s_variance * g);
  }
}

}  // namespace kernels

// normed_output, input, residual: [tokens, hidden_units] contiguous; gamma: [hidden_units].
// residual is read and overwritten with residual + input; input is not modified.
template <typename T>
void invokeGeneralRmsNormResidual(T* normed_output, const T* input, T* residual, const T* gamma, const float eps,
                                  const int tokens, const int hidden_units, cudaStream_t stream) {
  dim3 grid(tokens);
  dim3 block(std::min(hidden_units, 1024));
  // the block reduction needs whole warps
  block.x = 32 * ((block.x + 31) / 32);
  kernels::generalRmsNormResidual<T><<<grid, block, 0, stream>>>(normed_output, input, residual, gamma, eps, tokens,
                                                                 hidden_units);
}

#define INSTANTIATE_GENERAL_RMSNORM_RESIDUAL(T)                                                                    \
  template void invokeGeneralRmsNormResidual<T>(T * normed_output, const T* input, T* residual, const T* gamma,    \
                                                const float eps, const int tokens, const int hidden_units,         \
                                                cudaStream_t stream)

INSTANTIATE_GENERAL_RMSNORM_RESIDUAL(__nv_bfloat16);

#undef INSTANTIATE_GENERAL_RMSNORM_RESIDUAL
