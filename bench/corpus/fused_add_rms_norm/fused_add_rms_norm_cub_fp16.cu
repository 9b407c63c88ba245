// Fused residual add + RMSNorm (fp16) in the style of vLLM's csrc/layernorm_kernels.cu: a kernel template over the
// element type, one token per block, block = min(hidden_size, 1024), cub::BlockReduce for the sum of squares.
// The add happens in the storage type (z = input + residual, rounded), z is stored to residual, and the second
// pass re-reads residual: input = (scalar_t)(x * inv_rms) * weight.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cub/cub.cuh>
#include <algorithm>
#include <cstdint>

namespace llm {

/* kerntune:
args  = ["input: inout f16[num_tokens * hidden_size]", "residual: inout f16[num_tokens * hidden_size]",
         "weight: in f16[hidden_size]", "epsilon: f32 = 1e-6", "num_tokens: i32 = num_tokens",
         "hidden_size: i32 = hidden_size"]
sizes = [{ num_tokens = 4096, hidden_size = 5120 }, { num_tokens = 32, hidden_size = 8192 },
         { num_tokens = 777, hidden_size = 4099 }]
grid  = "num_tokens"
block = "min(hidden_size, 1024)"
*/
template <typename scalar_t>
__global__ void fused_add_rms_norm_kernel(scalar_t* __restrict__ input,         // [..., hidden_size]
                                          scalar_t* __restrict__ residual,      // [..., hidden_size]
                                          const scalar_t* __restrict__ weight,  // [hidden_size]
                                          const float epsilon, const int num_tokens, const int hidden_size) {
  __shared__ float s_variance;
  float variance = 0.0f;

  for (int idx = threadIdx.x; idx < hidden_size; idx += blockDim.x) {
    const int64_t i = (int64_t)blockIdx.x * hidden_size + idx;
    scalar_t z = input[i];
    z += residual[i];
    const float x = (float)z;
    variance += x * x;
    residual[i] = z;
  }

  using BlockReduce = cub::BlockReduce<float, 1024>;
  __shared__ typename BlockReduce::TempStorage reduceStore;
  variance = BlockReduce(reduceStore).Reduce(variance, cuda::std::plus<float>(), blockDim.x);

  if (threadIdx.x == 0) {
    s_variance = rsqrtf(variance / hidden_size + epsilon);
  }
  __syncthreads();

  for (int idx = threadIdx.x; idx < hidden_size; idx += blockDim.x) {
    const int64_t i = (int64_t)blockIdx.x * hidden_size + idx;
    const float x = (float)residual[i];
    input[i] = ((scalar_t)(x * s_variance)) * weight[idx];
  }
}

}  // namespace llm

void fused_add_rms_norm(__half* input, __half* residual, const __half* weight, float epsilon, int num_tokens,
                        int hidden_size, cudaStream_t stream) {
  dim3 grid(num_tokens);
  dim3 block(std::min(hidden_size, 1024));
  llm::fused_add_rms_norm_kernel<__half><<<grid, block, 0, stream>>>(input, residual, weight, epsilon, num_tokens,
                                                                     hidden_size);
}
