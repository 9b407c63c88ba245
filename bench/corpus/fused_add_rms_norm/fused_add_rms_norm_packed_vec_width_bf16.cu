// vLLM's vectorized fused_add_rms_norm, in place on both tensors: residual = bf16(input + residual), then
// input = bf16(bf16(residual * inv_rms) * weight), inv_rms = rsqrt(mean(residual^2) + epsilon) from the rounded sums.
// The row is handled as packed vectors of `width` bf16 (16 bytes for width 8): a PackedVec<scalar_t, width> struct,
// aligned to its size, loaded and stored whole, with member operators that do the arithmetic in fp32 and round each
// result back to bf16 (+= the residual add, sum_squares, *= a float scale, *= the weight vector). The kernel is a
// template over (scalar_t, width); the host picks width 8, 4 or 2 from hidden_size % 8 (spec = <bf16, 8>).
// Launch as vLLM sizes it: one token per block, block = min(hidden_size, max_block_size) with max_block_size 1024
// for fewer than 256 tokens and 256 otherwise (smaller blocks for more blocks per SM when there are many tokens),
// not divided by the width, so with 1024 threads a row of 512 vectors leaves half of the block idle. The sum of
// squares is reduced by shuffle-down within each warp (a lane mask for a partial last warp) and the warp sums in
// shared memory; thread 0 publishes inv_rms through __shared__ s_variance. The second pass re-reads the residual.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <algorithm>
#include <cassert>
#include <cstdint>

namespace vllm_style {

template <typename scalar_t>
struct TypeConvert;

template <>
struct TypeConvert<__nv_bfloat16> {
  static __device__ __forceinline__ float to_float(const __nv_bfloat16 x) { return __bfloat162float(x); }
  static __device__ __forceinline__ __nv_bfloat16 from_float(const float x) { return __float2bfloat16_rn(x); }
};

template <typename scalar_t, int width>
struct alignas(sizeof(scalar_t) * width) PackedVec {
  static_assert(width > 0 && (width & (width - 1)) == 0, "width must be a power of two");
  using Cvt = TypeConvert<scalar_t>;
  scalar_t data[width];

  __device__ __forceinline__ PackedVec& operator+=(const PackedVec& other) {
#pragma unroll
    for (int i = 0; i < width; ++i) data[i] = Cvt::from_float(Cvt::to_float(data[i]) + Cvt::to_float(other.data[i]));
    return *this;
  }

  __device__ __forceinline__ PackedVec& operator*=(const PackedVec& other) {
#pragma unroll
    for (int i = 0; i < width; ++i) data[i] = Cvt::from_float(Cvt::to_float(data[i]) * Cvt::to_float(other.data[i]));
    return *this;
  }

  __device__ __forceinline__ PackedVec& operator*=(const float scale) {
#pragma unroll
    for (int i = 0; i < width; ++i) data[i] = Cvt::from_float(Cvt::to_float(data[i]) * scale);
    return *this;
  }

  __device__ __forceinline__ float sum_squares() const {
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < width; ++i) {
      const float x = Cvt::to_float(data[i]);
      s += x * x;
    }
    return s;
  }
};

// Sum over the block; the result is valid in thread 0. blockDim.x need not be a multiple of 32.
__device__ __forceinline__ float block_reduce_sum(float v) {
  __shared__ float warp_sums[32];
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int lanes_here = min(32, static_cast<int>(blockDim.x) - warp * 32);
  const unsigned mask = lanes_here == 32 ? 0xffffffffu : ((1u << lanes_here) - 1u);
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other = __shfl_down_sync(mask, v, offset);
    if (lane + offset < lanes_here) v += other;
  }
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  float total = 0.0f;
  if (threadIdx.x == 0) {
    const int num_warps = (blockDim.x + 31) / 32;
    for (int w = 0; w < num_warps; ++w) total += warp_sums[w];
  }
  return total;
}

/* kerntune:
args  = ["input: inout bf16[num_tokens * hidden_size]", "residual: inout bf16[num_tokens * hidden_size]",
         "weight: in bf16[hidden_size]", "epsilon: f32 = 1e-6", "num_tokens: i32 = num_tokens",
         "hidden_size: i32 = hidden_size"]
sizes = [{ num_tokens = 8192, hidden_size = 4096 }, { num_tokens = 4, hidden_size = 8192 },
         { num_tokens = 1001, hidden_size = 4104 }]
grid  = "num_tokens"
block = "min(hidden_size, 1024 if num_tokens < 256 else 256)"
template_args = ["__nv_bfloat16", "8"]
*/
template <typename scalar_t, int width>
__global__ void fused_add_rms_norm_vec_kernel(scalar_t* __restrict__ input,     // [num_tokens, hidden_size]
                                              scalar_t* __restrict__ residual,  // [num_tokens, hidden_size]
                                              const scalar_t* __restrict__ weight,  // [hidden_size]
                                              const float epsilon, const int num_tokens, const int hidden_size) {
  using Vec = PackedVec<scalar_t, width>;
  const int vec_hidden_size = hidden_size / width;
  const int64_t row_vec = static_cast<int64_t>(blockIdx.x) * vec_hidden_size;
  Vec* __restrict__ input_v = reinterpret_cast<Vec*>(input);
  Vec* __restrict__ residual_v = reinterpret_cast<Vec*>(residual);
  const Vec* __restrict__ weight_v = reinterpret_cast<const Vec*>(weight);
  __shared__ float s_variance;

  float variance = 0.0f;
  for (int idx = threadIdx.x; idx < vec_hidden_size; idx += blockDim.x) {
    const int64_t id = row_vec + idx;
    Vec temp = input_v[id];
    temp += residual_v[id];
    variance += temp.sum_squares();
    residual_v[id] = temp;
  }
  variance = block_reduce_sum(variance);
  if (threadIdx.x == 0) s_variance = rsqrtf(variance / hidden_size + epsilon);
  __syncthreads();

  for (int idx = threadIdx.x; idx < vec_hidden_size; idx += blockDim.x) {
    const int64_t id = row_vec + idx;
    Vec temp = residual_v[id];
    temp *= s_variance;
    temp *= weight_v[idx];
    input_v[id] = temp;
  }
}

}  // namespace vllm_style

#define LAUNCH_FUSED_ADD_RMS_NORM(width)                                                                       \
  vllm_style::fused_add_rms_norm_vec_kernel<__nv_bfloat16, width>                                              \
      <<<grid, block, 0, stream>>>(input, residual, weight, epsilon, num_tokens, hidden_size)

// input, residual: [num_tokens, hidden_size] bf16, both updated in place; weight: [hidden_size] bf16. Device
// pointers, 16-byte aligned; hidden_size even.
void fused_add_rms_norm(__nv_bfloat16* input, __nv_bfloat16* residual, const __nv_bfloat16* weight, float epsilon,
                        int num_tokens, int hidden_size, cudaStream_t stream) {
  assert(hidden_size % 2 == 0);
  if (num_tokens == 0) return;
  dim3 grid(num_tokens);
  // many tokens: smaller blocks, more of them resident per SM
  const int max_block_size = (num_tokens < 256) ? 1024 : 256;
  dim3 block(std::min(hidden_size, max_block_size));
  switch (hidden_size % 8) {
    case 0:
      LAUNCH_FUSED_ADD_RMS_NORM(8);
      break;
    case 4:
      LAUNCH_FUSED_ADD_RMS_NORM(4);
      break;
    default:  // 2 or 6
      LAUNCH_FUSED_ADD_RMS_NORM(2);
      break;
  }
}
