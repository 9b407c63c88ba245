// Fused residual add + RMSNorm + static FP8 quantization (bf16 in, fp8 e4m3 out), in the style of vLLM's fused
// "layernorm + quant" kernels (fused_add_rms_norm_static_fp8_quant): the RMSNorm of the residual stream feeds an FP8
// GEMM directly, so the normalized row never goes back to memory in bf16.
//   residual = bf16(input + residual)                        (in place; input is only read)
//   out      = fp8(clamp(bf16(bf16(residual * inv_rms) * weight) * (1 / *scale), -448, 448))
// The scale is a static per-tensor activation scale read from a one-element device tensor (no host sync) and
// inverted once per thread; the normalized value is rounded to bf16 before and after the weight multiply (done in
// bf16), as the unquantized kernel rounds it. Kernel template over the activation type and the fp8 type, one token
// per block, block = min(hidden_size, 1024), the sum of squares reduced with cub::BlockReduce<float, 1024> over
// blockDim.x valid threads, rsqrt published by thread 0 through __shared__ s_variance; the second pass re-reads
// the updated residual from global memory. Scalar loads and stores.
//
// Tolerance: atol = 1. The fp8 output is compared as bytes; e4m3 codes of one sign are monotonic, so adjacent
// values are one apart. A correct rewrite that sums the squares in another order moves inv_rms by an ulp, which
// moves a few values per million across a bf16 or fp8 rounding boundary: one code. The spec's atol is shared by
// every buffer, so the bf16 residual (an exactly rounded sum) is held to rtol 1e-2 plus atol 1 as well.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cub/cub.cuh>
#include <algorithm>
#include <cstdint>

#if CUB_VERSION >= 200800
#include <cuda/std/functional>
using BlockSumOp = cuda::std::plus<>;
#else
using BlockSumOp = cub::Sum;
#endif

namespace serving {

template <typename fp8_type>
struct fp8_traits;

template <>
struct fp8_traits<__nv_fp8_e4m3> {
  static constexpr float max_finite = 448.0f;
};

template <>
struct fp8_traits<__nv_fp8_e5m2> {
  static constexpr float max_finite = 57344.0f;
};

// value * scale (the inverted scale) or value / scale, saturated to the fp8 type's finite range, then converted
template <bool scale_is_inverted, typename fp8_type>
__device__ __forceinline__ fp8_type scaled_fp8_convert(const float value, const float scale) {
  const float scaled = scale_is_inverted ? value * scale : value / scale;
  const float fp8_max = fp8_traits<fp8_type>::max_finite;
  return static_cast<fp8_type>(fmaxf(-fp8_max, fminf(scaled, fp8_max)));
}

/* kerntune:
args  = ["out: out u8[num_tokens * hidden_size]", "input: in bf16[num_tokens * hidden_size]",
         "residual: inout bf16[num_tokens * hidden_size]", "weight: in bf16[hidden_size]",
         "scale: in f32[1] ~ uniform(0.5, 2)", "epsilon: f32 = 1e-6", "num_tokens: i32 = num_tokens",
         "hidden_size: i32 = hidden_size"]
sizes = [{ num_tokens = 4096, hidden_size = 8192 }, { num_tokens = 8, hidden_size = 7168 },
         { num_tokens = 1531, hidden_size = 5119 }]
grid  = "num_tokens"
block = "min(hidden_size, 1024)"
atol  = 1
template_args = ["__nv_bfloat16", "__nv_fp8_e4m3"]
*/
template <typename scalar_t, typename fp8_type>
__global__ void fused_add_rms_norm_static_fp8_quant_kernel(
    fp8_type* __restrict__ out,           // [num_tokens, hidden_size]
    scalar_t* __restrict__ input,         // [num_tokens, hidden_size], read only
    scalar_t* __restrict__ residual,      // [num_tokens, hidden_size], updated in place
    const scalar_t* __restrict__ weight,  // [hidden_size]
    const float* __restrict__ scale,      // [1]
    const float epsilon, const int num_tokens, const int hidden_size) {
  __shared__ float s_variance;
  const int64_t token_offset = static_cast<int64_t>(blockIdx.x) * hidden_size;
  float variance = 0.0f;

  // residual += input, rounded to scalar_t; the sum of squares of the rounded values
  for (int idx = threadIdx.x; idx < hidden_size; idx += blockDim.x) {
    scalar_t z = input[token_offset + idx];
    z += residual[token_offset + idx];
    const float x = static_cast<float>(z);
    variance += x * x;
    residual[token_offset + idx] = z;
  }

  using BlockReduce = cub::BlockReduce<float, 1024>;
  __shared__ typename BlockReduce::TempStorage reduce_store;
  // the aggregate is valid in thread 0 only
  variance = BlockReduce(reduce_store).Reduce(variance, BlockSumOp{}, blockDim.x);

  if (threadIdx.x == 0) {
    s_variance = rsqrtf(variance / hidden_size + epsilon);
  }
  __syncthreads();

  // one division per thread instead of one per element
  const float scale_inv = 1.0f / *scale;

  for (int idx = threadIdx.x; idx < hidden_size; idx += blockDim.x) {
    const float x = static_cast<float>(residual[token_offset + idx]);
    const float out_norm = static_cast<float>(static_cast<scalar_t>(x * s_variance) * weight[idx]);
    out[token_offset + idx] = scaled_fp8_convert<true, fp8_type>(out_norm, scale_inv);
  }
}

}  // namespace serving

// out: [num_tokens, hidden_size] fp8 e4m3; input, residual: [num_tokens, hidden_size] bf16 (residual is read and
// overwritten with input + residual); weight: [hidden_size] bf16; scale: one fp32 on the device.
void fused_add_rms_norm_static_fp8_quant(__nv_fp8_e4m3* out, __nv_bfloat16* input, __nv_bfloat16* residual,
                                         const __nv_bfloat16* weight, const float* scale, float epsilon,
                                         int num_tokens, int hidden_size, cudaStream_t stream) {
  dim3 grid(num_tokens);
  dim3 block(std::min(hidden_size, 1024));
  serving::fused_add_rms_norm_static_fp8_quant_kernel<__nv_bfloat16, __nv_fp8_e4m3>
      <<<grid, block, 0, stream>>>(out, input, residual, weight, scale, epsilon, num_tokens, hidden_size);
}
